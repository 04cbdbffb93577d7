"""Model registry: record trained models, find the one to score with, shape views."""

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.core.time import as_utc
from app.registry.models import TrainedModel

DEFAULT_BAND_THRESHOLDS = {"low_medium": 0.05, "medium_high": 0.20}
"""Defaults for a rare outcome (~2% prevalence): medium from 2.5x, high from 10x the base rate."""


class ModelNotFound(NotFound):
    kind, title = "model-not-found", "Model not found"


def get(*, session: Session, model_id: int) -> TrainedModel:
    model = session.get(TrainedModel, model_id)
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist", field="model_id")
    return model


def latest(*, session: Session) -> TrainedModel:
    """The most recent successful model (the one scoring uses when none is named)."""
    model = session.scalar(select(TrainedModel).order_by(TrainedModel.id.desc()).limit(1))
    if model is None:
        raise ModelNotFound("no trained model yet: submit a training job first", field="model_id")
    return model


def list_page(*, session: Session, limit: int, offset: int) -> tuple[list[TrainedModel], int]:
    total = session.scalar(select(func.count()).select_from(TrainedModel)) or 0
    stmt = select(TrainedModel).order_by(TrainedModel.id.desc()).limit(limit).offset(offset)
    return list(session.scalars(stmt)), total


def privacy_statement(model: TrainedModel) -> dict[str, Any]:
    return {
        "epsilon": model.epsilon,
        "delta": model.delta,
        "accountant": model.accountant,
        "epsilon_rdp": model.epsilon_rdp,
        "non_private": model.epsilon is None,
        "unit": "record (one patient)",
    }


def to_out(model: TrainedModel) -> dict[str, Any]:
    return {
        "id": model.id,
        "job_id": model.job_id,
        "dataset_id": model.dataset_id,
        "kind": model.kind,
        "artifact_sha256": model.artifact_sha256,
        "features": model.feature_names,
        "privacy": privacy_statement(model),
        "metrics": model.metrics,
        "band_thresholds": model.band_thresholds,
        "created_at": as_utc(model.created_at),
    }
