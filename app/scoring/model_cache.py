"""Which model scores, remembered per process for up to ``TTL_SECONDS``.

Resolving the model (the active one, or a named one) was a database session, a query and a
commit on every request: about half of the single-patient scoring path's work. Models are
immutable but for their band thresholds, and which one is active changes rarely, so a resolved
model is remembered as a detached ``ScoringModel`` snapshot:

- a change committed in *this* process (activate, rollback, new band thresholds, the embedded
  worker's automatic first activation) forgets every snapshot as soon as it commits, and a
  lookup that began before that commit stores nothing (``app.core.recent``), so the next
  request sees the change;
- a change committed by another process (a second API replica, a separate worker) is seen
  here within ``TTL_SECONDS``. Every answer names the model id and version that scored it.

Errors (no such model, none active) are never remembered.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.core.database import get_database
from app.core.time import as_utc
from app.datasets.schema.encoding import Encoder, encoder_for
from app.registry import service as registry_service
from app.registry.models import TrainedModel

TTL_SECONDS = 1.0


@dataclass(frozen=True)
class ScoringModel:
    """What scoring reads of a registered model, detached from any session."""

    id: int
    artifact_sha256: str
    band_thresholds: dict[str, float]
    block: dict[str, Any]  # id, version, kind, dataset, trained_at and the privacy statement
    encoder: Encoder  # the declared schema it was trained on: what a patient must give
    schema_hash: str

    @classmethod
    def of(cls, model: TrainedModel) -> "ScoringModel":
        return cls(
            id=model.id,
            artifact_sha256=model.artifact_sha256,
            band_thresholds=dict(model.band_thresholds),
            block=model_block(model),
            encoder=encoder_for(registry_service.schema_of(model)),
            schema_hash=registry_service.schema_hash_of(model),
        )


def model_block(model: TrainedModel) -> dict[str, Any]:
    """Which model scored, its version and its (epsilon, delta) statement."""
    trained_at: datetime | None = as_utc(model.created_at)
    return {
        "id": model.id,
        "version": registry_service.version_of(model),
        "kind": model.kind,
        "dataset_id": model.dataset_id,
        "trained_at": None if trained_at is None
        else trained_at.isoformat().replace("+00:00", "Z"),
        **registry_service.privacy_statement(model).model_dump(),
    }


def resolve(model_id: int | None) -> ScoringModel:
    """The named model, else the active one: from memory, or from the database.

    Raises:
        ModelNotFound: no such model, or no model trained yet (404).
        NoActiveModel: no model named and none active (409).
    """
    database = get_database()
    key = (database.token, model_id)
    remembered = registry_service.scoring_models
    hit = remembered.get(key, TTL_SECONDS)
    if hit is not None:
        return hit
    ticket = remembered.begin()
    with database.session_scope() as session:
        snapshot = ScoringModel.of(registry_service.resolve(session=session, model_id=model_id))
    remembered.put(key, snapshot, ticket)
    return snapshot
