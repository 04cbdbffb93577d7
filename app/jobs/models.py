"""Job table; it is also the queue the workers claim from."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow
from app.core.vocabulary import StrEnumColumn, WordColumn
from app.jobs.kinds.base import WORD_LENGTH

# The built-in kinds' words, for the domains that queue them; each is declared in its module
# of app.jobs.kinds, which is the registry (a new kind needs no line here).
from app.jobs.kinds.comparison import COMPARISON as COMPARISON
from app.jobs.kinds.federated import FEDERATED as FEDERATED
from app.jobs.kinds.monitoring import MONITORING as MONITORING
from app.jobs.kinds.privacy_audit import PRIVACY_AUDIT as PRIVACY_AUDIT
from app.jobs.kinds.train import TRAIN as TRAIN


class JobStatus(StrEnum):
    """Where a job is in the queue; the last three are final."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The short names callers import (members, so equal to the strings they were).
QUEUED, RUNNING, SUCCEEDED = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.SUCCEEDED
FAILED, CANCELLED = JobStatus.FAILED, JobStatus.CANCELLED
FINISHED = (SUCCEEDED, FAILED, CANCELLED)


class NotDpSgd(ValueError):
    """A DP-SGD plan was asked of a job that is not DP-SGD (a one-release job)."""


@dataclass(frozen=True)
class DpSgdPlan:
    """A DP-SGD job's plan, every column set: what its training and its charge read."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    epochs: int
    max_grad_norm: float


class Job(Base):
    __tablename__ = "job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    status: Mapped[JobStatus] = mapped_column(StrEnumColumn(JobStatus, 16), default=QUEUED,
                                              index=True)
    # A registered kind's word (app.jobs.kinds); its handler is the worker's (worker.kinds).
    kind: Mapped[str] = mapped_column(WordColumn(WORD_LENGTH), default=TRAIN,
                                      server_default=TRAIN.name)
    # What the caller asked for (exactly one of the two is set) and what it resolved to.
    target_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    requested_noise_multiplier: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The noise multiplier of the job's mechanism: DP-SGD's, or a one-release job's Gaussian.
    noise_multiplier: Mapped[float] = mapped_column(Float)
    # DP-SGD's plan; null for a job that is not DP-SGD (a monitoring run's or a comparison's
    # one release: ``dp_sgd`` is False, its event is on its ledger entry).
    sample_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    epochs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    delta: Mapped[float] = mapped_column(Float)
    max_grad_norm: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The training request (a training job's, a search's, an audit's target, a federated
    # site's local recipe); null for a kind that trains nothing (a monitoring run).
    training: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True),
                                                            nullable=True)
    # The kind's own typed payload beside it (its handler parses it: ``worker.handlers``).
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True),
                                                           nullable=True)
    progress_epoch: Mapped[int] = mapped_column(Integer, default=0)
    epsilon_spent: Mapped[float | None] = mapped_column(Float, nullable=True)
    epsilon_per_epoch: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    @property
    def dp_sgd(self) -> bool:
        """Whether the job trains by DP-SGD (its plan's columns are set)."""
        return self.steps is not None

    @property
    def dp_sgd_plan(self) -> DpSgdPlan:
        """Raises: NotDpSgd: the job is not DP-SGD (its plan's columns are null)."""
        if (self.sample_rate is None or self.steps is None or self.epochs is None
                or self.max_grad_norm is None):
            raise NotDpSgd(f"job {self.id} ({self.kind}) is not DP-SGD")
        return DpSgdPlan(self.noise_multiplier, self.sample_rate, self.steps, self.epochs,
                         self.max_grad_norm)

    @property
    def training_request(self) -> dict[str, Any]:
        """The stored training request; empty for a kind that trains nothing."""
        return self.training or {}

    @property
    def non_private(self) -> bool:
        return self.noise_multiplier == 0.0
