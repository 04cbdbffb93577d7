"""Scoring: probability, risk band, and Shapley contributions with reasons.

Everything follows the scoring model's declared schema: the features a patient must give (and
their allowed values), the encoding, the reference patient and the reasons. One implementation
for one patient and for 10,000: the batch core evaluates the model on every coalition of every
patient in blocks (``app.scoring.explain``), and the single-patient endpoint, FHIR and CDS Hooks
call it with n = 1. Patient features are never logged here or anywhere else.
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
from app.datasets.encoding import Encoder, built_encoder
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.scoring import model_cache
from app.scoring.explain import Explanation, explain
from app.scoring.model_cache import ScoringModel
from app.scoring.patients import PathOf, raw_rows
from app.scoring.reasons import Shown, reason_of, severity_of, shown_value
from app.scoring.schemas import RiskResult

_cache: dict[str, nn.Module] = {}
_cache_lock = threading.Lock()

REFERENCE_NOTE = "public reference patient from the model's declared schema, not from private data"

def single_path(k: int) -> tuple[Any, ...]:
    """Where the one patient's features sit in a ``/v1/risk`` body."""
    return ("features",)


def batch_path(k: int) -> tuple[Any, ...]:
    """Where patient k's features sit in a ``/v1/risk/batch`` body."""
    return ("patients", k, "features")


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


def _linear_weights(network: nn.Module) -> np.ndarray | None:
    """The input weights of a logistic model (its log-odds are linear in the inputs)."""
    layers = list(network.children()) if isinstance(network, nn.Sequential) else []
    if len(layers) == 1 and isinstance(layers[0], nn.Linear):
        return layers[0].weight.detach().double().numpy()[0]
    return None


def explain_rows(network: nn.Module, encoder: Encoder, raw: np.ndarray) -> Explanation:
    """Shapley values on the log-odds and on the probability scale, with their bases.

    Coalitions are built on encoded inputs, a player's inputs together (encoding is per
    feature, so encoding a coalition and taking the coalition of encoded rows agree).
    """

    def log_odds(inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return network(torch.from_numpy(inputs)).squeeze(-1).double().numpy()

    x = encoder.encode(raw).astype(np.float32)
    return explain(log_odds, x, encoder.reference_encoded.astype(np.float32),
                   encoder.player_of_input, linear_weights=_linear_weights(network))


@lru_cache(maxsize=4096)
def _explained(encoder_hash: str, index: int, value: float
               ) -> tuple[str, dict[str, Any] | None, Shown]:
    feature = built_encoder(encoder_hash).schema.features[index]
    return reason_of(feature, value), severity_of(feature, value), shown_value(feature, value)


def explained_value(encoder: Encoder, index: int, value: float
                    ) -> tuple[str, dict[str, Any] | None, Shown]:
    """(reason, severity band, value as shown) of one feature value, cached per schema."""
    return _explained(encoder.hash, index, value)


NEUTRAL_BELOW = 1e-9
"""A contribution smaller than this (on the log-odds scale) is rounding, not an effect: a
feature at its reference value gets +-1e-12 from float32 arithmetic, and must not read as
"raises" or "lowers"."""


def direction_of(contribution: float) -> str:
    if abs(contribution) < NEUTRAL_BELOW:
        return "neutral"
    return "raises" if contribution > 0 else "lowers"


@dataclass(frozen=True)
class Scored:
    """Scores of n patients as plain lists (row k is patient k), before any shaping.

    Each result repeats the thresholds, the reference's log-odds and probability (its
    contributions add up to its own log-odds / probability from there) and the model's id,
    version, epsilon and delta; the full statement and reference patient are given once.
    """

    model: dict[str, Any]
    encoder: Encoder
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
        features = self.encoder.schema.features
        items = []
        for i in self.order[k]:
            reason, severity, shown = explained_value(self.encoder, i, row[i])
            items.append({
                "feature": features[i].name,
                "label": features[i].label or features[i].name,
                "value": shown,
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


def score_rows(*, model: ScoringModel, raw: np.ndarray) -> Scored:
    """The batch core: every patient's score and exact Shapley contributions, in order.

    Raises:
        ModelUnavailable: the model gives a non-finite score (unusable weights).
    """
    e = explain_rows(network_for(model), model.encoder, raw)
    if not (np.isfinite(e.full).all() and np.isfinite(e.phi).all()):
        raise registry_service.ModelUnavailable(
            f"model {model.id} gives a non-finite score", field="model_id"
        )
    return Scored(
        # Copies: the snapshot is shared by every request that scores with it.
        model=dict(model.block),
        encoder=model.encoder,
        band_thresholds=dict(model.band_thresholds),
        reference={
            "features": {f.name: f.reference for f in model.encoder.schema.features},
            "log_odds": e.base,
            "probability": e.base_p,
            "note": REFERENCE_NOTE,
            "explanation": {"method": e.method, "standard_error": e.standard_error},
        },
        raw=raw.tolist(),
        probability=e.p.tolist(),
        log_odds=e.full.tolist(),
        phi=e.phi.tolist(),
        phi_p=e.phi_p.tolist(),
        order=np.argsort(-np.abs(e.phi), axis=1, kind="stable").tolist(),
    )


def score_batch(
    *, patients: Sequence[Mapping[str, Any]], model_id: int | None, at: PathOf = batch_path
) -> Scored:
    """Score many patients with the named model or the active one, in request order; each
    patient's features are checked against that model's schema.

    Raises:
        ModelNotFound: no such model, or no model trained yet (404).
        NoActiveModel: no model named and none active (409).
        ModelUnavailable: the model's artifact is missing or corrupt (409).
        RequestValidationError: features that the model's schema does not allow (422).
    """
    model = model_cache.resolve(model_id)
    return score_rows(model=model, raw=raw_rows(model.encoder, patients, at))


def score(*, features: Mapping[str, Any], model_id: int | None) -> dict[str, Any]:
    """Score one patient: the batch core with n = 1, with the full reference and statement."""
    scored = score_batch(patients=[features], model_id=model_id, at=single_path)
    result = {k: v for k, v in scored.result(0).items() if k != "id"}
    return {**result, "reference": scored.reference, "model": scored.model}


def assess(*, features: Mapping[str, Any], model_id: int | None) -> RiskResult:
    """``score`` as a typed ``RiskResult``, for FHIR and CDS Hooks to read by attribute.

    ``/v1/risk`` writes ``score``'s dict straight to JSON instead (``render.document_json``):
    on the single-patient latency path, validating the answer would cost more than it checks.
    """
    return RiskResult.model_validate(score(features=features, model_id=model_id))
