"""The ledger's two append-only tables, both covered by a per-dataset hash chain.

``ledger_entry``: one per job, holding the mechanism so spend can be recomposed tightly.
``ledger_event``: one per state change of an entry (reserve -> commit | release). Neither table
is ever updated or deleted from; an entry's ``status`` is derived from its latest event.
Each event carries ``hash = sha256(canonical content + prev_hash)`` chained per dataset (see
``app.ledger.chain``); a reserve event's content includes its entry's mechanism parameters.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    case,
    event,
    select,
)
from sqlalchemy.orm import Mapped, column_property, mapped_column, object_session

from app.core.database import Base
from app.core.time import utcnow

RESERVED, COMMITTED, RELEASED = "reserved", "committed", "released"
RESERVE, COMMIT, RELEASE = "reserve", "commit", "release"
STATUS_AFTER = {RESERVE: RESERVED, COMMIT: COMMITTED, RELEASE: RELEASED}
SUBSAMPLED_GAUSSIAN = "poisson_subsampled_gaussian"
NON_PRIVATE = "non_private"


class LedgerEvent(Base):
    __tablename__ = "ledger_event"
    __table_args__ = (
        UniqueConstraint("dataset_id", "seq"),
        CheckConstraint("kind IN ('reserve', 'commit', 'release')", name="kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"))
    entry_id: Mapped[int] = mapped_column(ForeignKey("ledger_entry.id"), index=True)
    # 1, 2, 3, ... per dataset: a gap shows a deleted record.
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


def _latest_event(column: Any, entry_id: Any) -> Any:
    return (
        select(column)
        .where(LedgerEvent.entry_id == entry_id)
        .order_by(LedgerEvent.seq.desc())
        .limit(1)
        .correlate_except(LedgerEvent)
        .scalar_subquery()
    )


class LedgerEntry(Base):
    __tablename__ = "ledger_entry"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id"), unique=True)
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
    # Read-only, from the latest event: reserved | committed | released, and when it became so.
    status: Mapped[str] = column_property(
        _latest_event(case(STATUS_AFTER, value=LedgerEvent.kind), id)
    )
    updated_at: Mapped[datetime] = column_property(_latest_event(LedgerEvent.created_at, id))


class AppendOnlyViolation(RuntimeError):
    """A code path tried to change or remove a ledger row; the ledger only grows."""


@event.listens_for(LedgerEntry, "before_update")
@event.listens_for(LedgerEvent, "before_update")
def _refuse_update(_mapper: Any, _connection: Any, target: Any) -> None:
    session = object_session(target)
    if session is None or session.is_modified(target, include_collections=False):
        raise AppendOnlyViolation(f"{type(target).__name__} rows are append-only")


@event.listens_for(LedgerEntry, "before_delete")
@event.listens_for(LedgerEvent, "before_delete")
def _refuse_delete(_mapper: Any, _connection: Any, target: Any) -> None:
    raise AppendOnlyViolation(f"{type(target).__name__} rows are append-only")
