"""Ledger entries: one per job, holding the mechanism so spend can be recomposed tightly."""

from datetime import datetime

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow

RESERVED, COMMITTED, RELEASED = "reserved", "committed", "released"
SUBSAMPLED_GAUSSIAN = "poisson_subsampled_gaussian"
NON_PRIVATE = "non_private"


class LedgerEntry(Base):
    __tablename__ = "ledger_entry"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"), unique=True)
    status: Mapped[str] = mapped_column(String(16), default=RESERVED)
    mechanism: Mapped[str] = mapped_column(String(48))
    noise_multiplier: Mapped[float] = mapped_column(Float)
    sample_rate: Mapped[float] = mapped_column(Float)
    steps: Mapped[int] = mapped_column(Integer)
    clip_norm: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    accountant: Mapped[str] = mapped_column(String(16))
    # Derived from the mechanism above at write time, kept for reading; never the source of truth.
    epsilon_rdp: Mapped[float | None] = mapped_column(Float, nullable=True)
    epsilon_prv: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
