"""Scoring: probability, risk band, and Shapley contributions with reasons.

Everything follows the scoring model's declared schema: the features a patient must give (and
their allowed values), the encoding, the reference patient and the reasons. One implementation
for one patient and for 10,000: the batch core evaluates the model on every coalition of every
patient in blocks (``app.scoring.explain``), and the single-patient endpoint, FHIR and CDS Hooks
call it with n = 1, and every view of the answer is read from one typed object
(``app.scoring.answer.RiskAnswer``). Patient features are never logged here or anywhere else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.datasets.schema.encoding import Encoder
from app.families import family_of_network
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.scoring import model_cache
from app.scoring.answer import RiskAnswer
from app.scoring.explain import Explanation, explain
from app.scoring.model_cache import ScoringModel
from app.scoring.patients import PathOf, impute, raw_rows
from app.scoring.schemas import ModelStatementOut, ReferenceOut, RiskResult

if TYPE_CHECKING:  # torch loads with the first model scored, not at the API's start
    from torch import nn

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
            # load_network reads artifact_sha256 and schema_hash, which ScoringModel has too.
            network = registry_service.load_network(model)  # type: ignore[arg-type]
            _cache[model.artifact_sha256] = network
        return network


def _linear_weights(network: nn.Module) -> np.ndarray | None:
    """The input weights when the network's family says its log-odds are linear in the
    inputs (the family that built it answers; a network built elsewhere gets the exact
    enumeration)."""
    family = family_of_network(network)
    return None if family is None else family.linear_weights(network)


def _additive_terms(network: nn.Module) -> Callable[[np.ndarray], np.ndarray] | None:
    """An additive family's per-feature terms (exact Shapley values), else None."""
    family = family_of_network(network)
    return None if family is None else family.additive_terms(network)


def explain_rows(network: nn.Module, encoder: Encoder, raw: np.ndarray) -> Explanation:
    """Shapley values on the log-odds and on the probability scale, with their bases.

    Coalitions are built on encoded inputs, a player's inputs together (encoding is per
    feature, so encoding a coalition and taking the coalition of encoded rows agree).
    """
    import torch

    def log_odds(inputs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return network(torch.from_numpy(inputs)).squeeze(-1).double().numpy()

    x = encoder.encode(raw).astype(np.float32)
    return explain(log_odds, x, encoder.reference_encoded.astype(np.float32),
                   encoder.player_of_input, linear_weights=_linear_weights(network),
                   terms=_additive_terms(network))


def score_rows(*, model: ScoringModel, raw: np.ndarray,
               ids: Sequence[str | None] | None = None) -> RiskAnswer:
    """The batch core: every patient's score and exact Shapley contributions, in order, as
    the one typed answer every view is read from.

    Args:
        raw: ``raw_rows``' rows; a feature not given (NaN) is scored at its reference value,
            and the answer says so.

    Raises:
        ModelUnavailable: the model gives a non-finite score (unusable weights).
    """
    raw, imputed = impute(model.encoder, raw)
    e = explain_rows(network_for(model), model.encoder, raw)
    if not (np.isfinite(e.full).all() and np.isfinite(e.phi).all()):
        raise registry_service.ModelUnavailable(
            f"model {model.id} gives a non-finite score", field="model_id"
        )
    reference = ReferenceOut.model_validate({
        "features": {f.name: f.reference for f in model.encoder.schema.features},
        "log_odds": e.base,
        "probability": e.base_p,
        "note": REFERENCE_NOTE,
        "explanation": {"method": e.method, "standard_error": e.standard_error},
    })
    return RiskAnswer(
        model=ModelStatementOut.model_validate(model.block),
        # A copy: the snapshot is shared by every request that scores with it.
        band_thresholds=dict(model.band_thresholds),
        reference=reference,
        encoder=model.encoder,
        ids=[None] * len(raw) if ids is None else list(ids),
        raw=raw.tolist(),
        probability=e.p.tolist(),
        log_odds=e.full.tolist(),
        phi=e.phi.tolist(),
        phi_p=e.phi_p.tolist(),
        order=np.argsort(-np.abs(e.phi), axis=1, kind="stable").tolist(),
        imputed=imputed,
    )


def score_batch(
    *, patients: Sequence[Mapping[str, Any]], model_id: int | None,
    ids: Sequence[str | None] | None = None, at: PathOf = batch_path,
) -> RiskAnswer:
    """Score many patients with the named model or the active one, in request order; each
    patient's features are checked against that model's schema.

    Args:
        ids: the caller's id for each patient (echoed in its result), or None for none.

    Raises:
        ModelNotFound: no such model, or no model trained yet (404).
        NoActiveModel: no model named and none active (409).
        ModelUnavailable: the model's artifact is missing or corrupt (409).
        RequestValidationError: features that the model's schema does not allow (422).
    """
    model = model_cache.resolve(model_id)
    return score_rows(model=model, raw=raw_rows(model.encoder, patients, at), ids=ids)


def score(*, features: Mapping[str, Any], model_id: int | None) -> RiskResult:
    """Score one patient: the batch core with n = 1, as the typed answer that ``/v1/risk``,
    FHIR and CDS Hooks all render."""
    return score_batch(patients=[features], model_id=model_id, at=single_path).single()
