"""The statistics release table: one row per answered request, charged by one ledger entry.

A release is written once, with its answers, in the transaction that charges it
(``app.statistics.service``); its ledger entry (``ledger_entry.statistics_release_id``) holds
the mechanism's exact parameters. Nothing here is ever updated.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow


class StatisticsRelease(Base):
    __tablename__ = "statistics_release"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    # A registered mechanism's name (app.statistics.mechanisms): gaussian (zCDP, the
    # default), laplace (pure epsilon), or any module added there.
    mechanism: Mapped[str] = mapped_column(String(16))
    target_epsilon: Mapped[float] = mapped_column(Float)
    # The target's delta (Gaussian); None for Laplace, which is pure epsilon-DP.
    delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Rows the release covers: every record of the dataset (public by convention).
    rows: Mapped[int] = mapped_column(Integer)
    # The validated request (queries and privacy target), as JSON.
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    # One answer per query: noisy values, standard errors, intervals and the mechanisms.
    answers: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    # The noise library and its version, e.g. "opendp 0.16.0".
    library: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
