"""Scoring: probability, risk band, and exact Shapley contributions with reasons.

Patient features are never logged here or anywhere else.
"""

import threading
from typing import Any

import numpy as np
import torch
from sqlalchemy.orm import Session
from torch import nn

from app.core.time import as_utc
from app.features import FEATURES, REFERENCE, scale
from app.registry import artifacts
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.scoring.explain import exact_shapley

_cache: dict[str, nn.Module] = {}
_cache_lock = threading.Lock()


def network_for(model: TrainedModel) -> nn.Module:
    """Load (once) the network behind a registered model; artifacts are immutable."""
    with _cache_lock:
        network = _cache.get(model.artifact_sha256)
        if network is None:
            network, _ = artifacts.load(model.artifact_sha256)
            _cache[model.artifact_sha256] = network
        return network


def log_odds(network: nn.Module, raw: np.ndarray) -> np.ndarray:
    x = torch.as_tensor(scale(raw), dtype=torch.float32)
    with torch.no_grad():
        return network(x).squeeze(-1).double().numpy()


def band_of(probability: float, thresholds: dict[str, float]) -> str:
    if probability >= thresholds["medium_high"]:
        return "high"
    if probability >= thresholds["low_medium"]:
        return "medium"
    return "low"


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def explain_rows(network: nn.Module, raw: np.ndarray) -> dict[str, np.ndarray]:
    """Shapley values on the log-odds and on the probability scale, with their bases."""
    phi, base, full = exact_shapley(lambda z: log_odds(network, z), raw, REFERENCE)
    phi_p, base_p, full_p = exact_shapley(
        lambda z: _sigmoid(log_odds(network, z)), raw, REFERENCE
    )
    return {"phi": phi, "base": base, "full": full, "phi_p": phi_p, "base_p": base_p, "p": full_p}


def _contributions(row: np.ndarray, phi: np.ndarray, phi_p: np.ndarray) -> list[dict[str, Any]]:
    items = []
    for i, f in enumerate(FEATURES):
        severity = f.severity(row[i])
        items.append(
            {
                "feature": f.name,
                "label": f.label,
                "value": float(row[i]),
                "contribution": float(phi[i]),
                "contribution_probability": float(phi_p[i]),
                "direction": "raises" if phi[i] > 0 else "lowers" if phi[i] < 0 else "neutral",
                "reason": f.reason(row[i]),
                "severity": None
                if severity is None
                else {"label": severity.label, "from": severity.lower, "to": severity.upper},
            }
        )
    items.sort(key=lambda c: abs(c["contribution"]), reverse=True)
    return items


def score(
    *, session: Session, features: dict[str, float], model_id: int | None
) -> dict[str, Any]:
    """Score one patient with the named model or the most recent successful one.

    Raises:
        ModelNotFound: no such model, or no model trained yet.
    """
    if model_id is not None:
        model = registry_service.get(session=session, model_id=model_id)
    else:
        model = registry_service.latest(session=session)
    network = network_for(model)
    raw = np.array([[float(features[f.name]) for f in FEATURES]])
    e = explain_rows(network, raw)
    probability = float(e["p"][0])
    thresholds = model.band_thresholds
    return {
        "probability": probability,
        "log_odds": float(e["full"][0]),
        "band": band_of(probability, thresholds),
        "band_thresholds": thresholds,
        "contributions": _contributions(raw[0], e["phi"][0], e["phi_p"][0]),
        "reference": {
            "features": {f.name: f.reference for f in FEATURES},
            "log_odds": float(e["base"][0]),
            "probability": float(e["base_p"][0]),
            "note": "public reference patient from the feature spec, not from private data",
        },
        "model": {
            "id": model.id,
            "kind": model.kind,
            "dataset_id": model.dataset_id,
            "trained_at": as_utc(model.created_at),
            **registry_service.privacy_statement(model),
        },
    }
