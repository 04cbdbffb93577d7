"""Trained models (artifact hash, privacy statement, held-out metrics, band thresholds) and the
history of which one is active."""

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import Mapped, column_property, mapped_column

from app.core.database import Base
from app.core.time import utcnow
from app.datasets.models import Dataset
from app.ledger.spaces import PatientSpace


def _space_column(column: Any, dataset_id: Any) -> Any:
    """One column of the patient space of the dataset ``dataset_id``, as a scalar subquery."""
    return (select(column).join(Dataset, Dataset.patient_space_id == PatientSpace.id)
            .where(Dataset.id == dataset_id).correlate_except(PatientSpace, Dataset)
            .scalar_subquery())


class TrainedModel(Base):
    __tablename__ = "model"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"), unique=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    artifact_sha256: Mapped[str] = mapped_column(String(64))
    feature_names: Mapped[list[str]] = mapped_column(JSON)
    # The declared schema the model was trained on (its dataset's, at training time) and its
    # hash: scoring validates and encodes with it, and the artifact must carry the same hash.
    schema_json: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    schema_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: non-private
    epsilon_rdp: Mapped[float | None] = mapped_column(Float, nullable=True)
    delta: Mapped[float] = mapped_column(Float)
    accountant: Mapped[str] = mapped_column(String(16))
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    band_thresholds: Mapped[dict[str, float]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # When the training dataset's rows were erased (null: they were not): the model, a DP
    # release of them, stays in use. Read from the dataset, loaded only when asked for (the
    # model list undefers it; scoring never reads it).
    training_rows_erased_at: Mapped[datetime | None] = column_property(
        select(Dataset.data_erased_at).where(Dataset.id == dataset_id).scalar_subquery(),
        deferred=True,
    )
    # The per-patient budget of the training dataset's patient space (app.ledger.spaces), as it
    # is now: every statement of the model names it (null: a public dataset, no space). Loaded
    # together, when first read.
    patient_budget_epsilon: Mapped[float | None] = column_property(
        _space_column(PatientSpace.budget_epsilon, dataset_id), deferred=True, group="patient")
    patient_budget_delta: Mapped[float | None] = column_property(
        _space_column(PatientSpace.budget_delta, dataset_id), deferred=True, group="patient")
    patient_space_kind: Mapped[str | None] = column_property(
        _space_column(PatientSpace.kind, dataset_id), deferred=True, group="patient")


class ModelActivation(Base):
    """Append-only history of which model scores by default; the newest row is the active one.

    ``seq`` is unique, so two writers racing to append the same step cannot both succeed.
    ``action``: ``auto`` (the first model stored while none was active), ``activate`` (an explicit
    ``POST /v1/models/{id}/activate``) or ``rollback`` (back to the model active before).
    """

    __tablename__ = "model_activation"
    __table_args__ = (
        UniqueConstraint("seq"),
        CheckConstraint("action IN ('auto', 'activate', 'rollback')", name="action"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    model_id: Mapped[int] = mapped_column(ForeignKey("model.id"), index=True)
    previous_model_id: Mapped[int | None] = mapped_column(ForeignKey("model.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
