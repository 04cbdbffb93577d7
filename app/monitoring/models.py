"""A monitoring run: one DP release measuring a model on a follow-up cohort (``app.monitoring``).

The run is a job of kind ``monitoring`` on the shared queue (its status, lease, cancel and
ledger entry are the job's); this row names what it measures: the model, the follow-up dataset
charged for it, and the statistics release on the model's training dataset that its data drift
is measured against (one per model, made by its first run and reused by every later one).
"""

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Integer
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow


class MonitoringRun(Base):
    __tablename__ = "monitoring_run"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("model.id"), index=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"), unique=True)
    reference_release_id: Mapped[int | None] = mapped_column(
        ForeignKey("statistics_release.id"), nullable=True)
    target_epsilon: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
