"""Scoring: probability, risk band, and exact Shapley contributions with reasons.

One implementation for one patient and for 10,000: the batch core evaluates the model once on
every coalition of every patient (n x 2^6 rows in one tensor), and the single-patient endpoint,
FHIR and CDS Hooks call it with n = 1. Patient features are never logged here or anywhere else.
"""

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from app.bands import Band, band_of
from app.features import FEATURE_NAMES, FEATURES, REFERENCE, scale
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.scoring import model_cache
from app.scoring.explain import coalition_inputs, shapley_from_values
from app.scoring.model_cache import ScoringModel
from app.scoring.schemas import RiskResult

_cache: dict[str, nn.Module] = {}
_cache_lock = threading.Lock()

REFERENCE_NOTE = "public reference patient from the feature spec, not from private data"


def network_for(model: TrainedModel | ScoringModel) -> nn.Module:
    """The network behind a registered model, loaded once (artifacts are immutable).

    The lock is held only while a missing artifact is loaded; scoring itself runs unlocked.
    """
    network = _cache.get(model.artifact_sha256)
    if network is not None:
        return network
    with _cache_lock:
        network = _cache.get(model.artifact_sha256)
        if network is None:
            network = registry_service.load_network(model)
            _cache[model.artifact_sha256] = network
        return network


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def coalition_log_odds(network: nn.Module, raw: np.ndarray) -> np.ndarray:
    """Log-odds of every coalition of every row, (n, 2^d), in one forward pass.

    Coalitions are built on scaled inputs (scaling is per feature, so scaling a coalition and
    taking the coalition of scaled rows agree) in float32: n x 2^d x d values, 15 MB for 10,000.
    """
    n, d = raw.shape
    x = scale(raw).astype(np.float32)
    reference = scale(REFERENCE[None, :]).astype(np.float32)[0]
    z = torch.from_numpy(coalition_inputs(x, reference))
    with torch.inference_mode():
        return network(z).squeeze(-1).double().numpy().reshape(n, 2**d)


def explain_rows(network: nn.Module, raw: np.ndarray) -> dict[str, np.ndarray]:
    """Shapley values on the log-odds and on the probability scale, with their bases.

    The probability-scale values are the sigmoid of the same coalition values, so both
    explanations are exact and additive from one forward pass.
    """
    values = coalition_log_odds(network, raw)
    p_values = _sigmoid(values)
    return {
        "phi": shapley_from_values(values),
        "base": values[:, 0],
        "full": values[:, -1],
        "phi_p": shapley_from_values(p_values),
        "base_p": p_values[:, 0],
        "p": p_values[:, -1],
    }


@lru_cache(maxsize=4096)
def explained_value(index: int, value: float) -> tuple[str, dict[str, Any] | None]:
    """(reason, severity band) of one feature value; values are whole numbers in public bounds."""
    f = FEATURES[index]
    band = f.severity(value)
    severity = None if band is None else {"label": band.label, "from": band.lower,
                                          "to": band.upper}
    return f.reason(value), severity


def direction_of(contribution: float) -> str:
    return "raises" if contribution > 0 else "lowers" if contribution < 0 else "neutral"


@dataclass(frozen=True)
class Scored:
    """Scores of n patients as plain lists (row k is patient k), before any shaping.

    Each result repeats the thresholds, the reference's log-odds and probability (its
    contributions add up to its own log-odds / probability from there) and the model's id,
    version, epsilon and delta; the full statement and reference patient are given once.
    """

    model: dict[str, Any]
    band_thresholds: dict[str, float]
    reference: dict[str, Any]
    raw: list[list[float]]
    probability: list[float]
    log_odds: list[float]
    phi: list[list[float]]
    phi_p: list[list[float]]
    order: list[list[int]]  # feature indices, largest absolute log-odds contribution first

    def __len__(self) -> int:
        return len(self.probability)

    @property
    def short_model(self) -> dict[str, Any]:
        return {k: self.model[k] for k in ("id", "version", "epsilon", "delta")}

    @property
    def short_reference(self) -> dict[str, float]:
        return {k: self.reference[k] for k in ("log_odds", "probability")}

    def band(self, k: int) -> Band:
        return band_of(self.probability[k], self.band_thresholds)

    def contributions(self, k: int) -> list[dict[str, Any]]:
        row, phi, phi_p = self.raw[k], self.phi[k], self.phi_p[k]
        items = []
        for i in self.order[k]:
            reason, severity = explained_value(i, row[i])
            items.append({
                "feature": FEATURES[i].name,
                "label": FEATURES[i].label,
                "value": row[i],
                "contribution": phi[i],
                "contribution_probability": phi_p[i],
                "direction": direction_of(phi[i]),
                "reason": reason,
                "severity": severity,
            })
        return items

    def result(self, k: int, patient_id: str | None = None) -> dict[str, Any]:
        """Patient k as one element of the batch's ``results``."""
        return {
            "id": patient_id,
            "probability": self.probability[k],
            "log_odds": self.log_odds[k],
            "band": self.band(k),
            "band_thresholds": self.band_thresholds,
            "contributions": self.contributions(k),
            "reference": self.short_reference,
            "model": self.short_model,
        }

    def document(self, ids: Sequence[str | None] | None = None) -> dict[str, Any]:
        """The batch response as a dict (``render.batch_json`` writes the same as JSON)."""
        return {
            "model": self.model,
            "band_thresholds": self.band_thresholds,
            "reference": self.reference,
            "results": [self.result(k, None if ids is None else ids[k]) for k in range(len(self))],
        }


def rows_of(patients: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Raw feature rows (n, d) in the spec's order."""
    return np.array([[float(p[name]) for name in FEATURE_NAMES] for p in patients],
                    dtype=np.float64).reshape(len(patients), len(FEATURE_NAMES))


def score_rows(*, model: ScoringModel, raw: np.ndarray) -> Scored:
    """The batch core: every patient's score and exact Shapley contributions, in order.

    Raises:
        ModelUnavailable: the model gives a non-finite score (unusable weights).
    """
    e = explain_rows(network_for(model), raw)
    if not (np.isfinite(e["full"]).all() and np.isfinite(e["phi"]).all()):
        raise registry_service.ModelUnavailable(
            f"model {model.id} gives a non-finite score", field="model_id"
        )
    return Scored(
        # Copies: the snapshot is shared by every request that scores with it.
        model=dict(model.block),
        band_thresholds=dict(model.band_thresholds),
        reference={
            "features": {f.name: f.reference for f in FEATURES},
            "log_odds": float(e["base"][0]),
            "probability": float(e["base_p"][0]),
            "note": REFERENCE_NOTE,
        },
        raw=raw.tolist(),
        probability=e["p"].tolist(),
        log_odds=e["full"].tolist(),
        phi=e["phi"].tolist(),
        phi_p=e["phi_p"].tolist(),
        order=np.argsort(-np.abs(e["phi"]), axis=1, kind="stable").tolist(),
    )


def score_batch(
    *, patients: Sequence[Mapping[str, float]], model_id: int | None
) -> Scored:
    """Score many patients with the named model or the active one, in request order.

    Raises:
        ModelNotFound: no such model, or no model trained yet (404).
        NoActiveModel: no model named and none active (409).
        ModelUnavailable: the model's artifact is missing or corrupt (409).
    """
    return score_rows(model=model_cache.resolve(model_id), raw=rows_of(patients))


def score(*, features: Mapping[str, float], model_id: int | None) -> dict[str, Any]:
    """Score one patient: the batch core with n = 1, with the full reference and statement."""
    scored = score_batch(patients=[features], model_id=model_id)
    result = {k: v for k, v in scored.result(0).items() if k != "id"}
    return {**result, "reference": scored.reference, "model": scored.model}


def assess(*, features: Mapping[str, float], model_id: int | None) -> RiskResult:
    """``score`` as a typed ``RiskResult``, for FHIR and CDS Hooks to read by attribute.

    ``/v1/risk`` writes ``score``'s dict straight to JSON instead (``render.document_json``):
    on the single-patient latency path, validating the answer would cost more than it checks.
    """
    return RiskResult.model_validate(score(features=features, model_id=model_id))
