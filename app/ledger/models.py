"""The ledger's two append-only tables, both covered by a per-dataset hash chain.

``ledger_entry``: one per job or per statistics release (exactly one of ``job_id`` and
``statistics_release_id``), holding its release as a dp-accounting ``DpEvent`` (``event``,
``app.privacy.events``): what every figure is composed from. Its mechanism columns (name,
noise multiplier, sample rate, steps; a statistics release's noisy vectors' noise multipliers,
``components``) describe the same event for reports and are checked against it.
``ledger_event``: one per state change of an entry, plus one per budget change of the dataset.
Neither table is ever updated or deleted from; an entry's state is derived from its events:

* ``reserve``: the whole planned mechanism is held against the budget (admission).
* ``commit`` with ``steps``: the first ``steps`` noisy steps touched data and are charged for
  good; one per epoch as training goes (cumulative, never decreasing). The rest stays reserved.
* ``release``: what is not committed goes back: everything for a job cancelled before it
  started, the unrun remainder for one stopped at an epoch boundary.
* ``budget``: the dataset's (epsilon, delta) budget was set, so the budget is chained too.
* ``scheme``: from this record on the chain hashes under a newer scheme; the record commits to
  what the new scheme covers for the entries reserved before it (their events).
Each event carries ``hash = sha256(canonical content + prev_hash)`` chained per dataset under
its ``scheme`` (see ``app.ledger.chain``); a reserve event's content includes its entry's
mechanism parameters and, from scheme 2, its event.
"""

from datetime import datetime
from enum import StrEnum
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
    case,
    column,
    event,
    exists,
    func,
    select,
    table,
    type_coerce,
)
from sqlalchemy.orm import Mapped, column_property, mapped_column, object_session

from app.core.database import Base
from app.core.time import utcnow
from app.core.vocabulary import StrEnumColumn
from app.privacy.events import NON_PRIVATE as NON_PRIVATE
from app.privacy.events import SUBSAMPLED_GAUSSIAN as SUBSAMPLED_GAUSSIAN


class EntryStatus(StrEnum):
    """An entry's state, derived from its events (``STATUS_AFTER``)."""

    RESERVED = "reserved"
    COMMITTED = "committed"
    RELEASED = "released"


class EventKind(StrEnum):
    """A ledger record's kind (the ``kind`` CHECK constraint lists the same words)."""

    RESERVE = "reserve"
    COMMIT = "commit"
    RELEASE = "release"
    BUDGET = "budget"
    SCHEME = "scheme"


# The short names callers import (members, so equal to the strings they were).
RESERVED, COMMITTED, RELEASED = EntryStatus.RESERVED, EntryStatus.COMMITTED, EntryStatus.RELEASED
RESERVE, COMMIT, RELEASE = EventKind.RESERVE, EventKind.COMMIT, EventKind.RELEASE
BUDGET, SCHEME = EventKind.BUDGET, EventKind.SCHEME
KINDS = tuple(EventKind)
STATUS_AFTER = {RESERVE: RESERVED, COMMIT: COMMITTED, RELEASE: RELEASED}
GENESIS_HASH = "0" * 64
# Scheme 1: records written before entries stored their event (their content is unchanged);
# scheme 2: a record's content names its scheme, and a reserve's its entry's event.
LEGACY_SCHEME, EVENT_SCHEME = 1, 2
CURRENT_SCHEME = EVENT_SCHEME

# The ledger's columns on the dataset row: the lock counter, the chain head and the budget.
# The row belongs to the datasets domain; the ledger reads and moves only these columns, through
# this Core view of the table, so it never imports a domain above it.
dataset_ledger = table(
    "dataset",
    column("id"),
    column("ledger_version"),
    column("ledger_head_seq"),
    column("ledger_head_hash"),
    column("budget_epsilon"),
    column("budget_delta"),
    column("filter_order"),
    column("patient_space_id"),
)


class LedgerEvent(Base):
    __tablename__ = "ledger_event"
    __table_args__ = (
        UniqueConstraint("dataset_id", "seq"),
        CheckConstraint("kind IN ('reserve', 'commit', 'release', 'budget', 'scheme')",
                        name="kind"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"))
    # None only for a budget or a scheme event.
    entry_id: Mapped[int | None] = mapped_column(
        ForeignKey("ledger_entry.id"), index=True, nullable=True
    )
    # 1, 2, 3, ... per dataset: a gap shows a deleted record.
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[EventKind] = mapped_column(StrEnumColumn(EventKind, 16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # commit: cumulative steps charged so far (None in records written before per-epoch
    # commits: the whole plan).
    steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # budget: the dataset's budget from this record on (None, None: no budget, public data).
    budget_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The chain scheme the hash is computed under (app.ledger.chain); never decreases.
    scheme: Mapped[int] = mapped_column(Integer, default=CURRENT_SCHEME,
                                        server_default=str(LEGACY_SCHEME))
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


def _has_event(kind: str, entry_id: Any) -> Any:
    return (
        exists()
        .where(LedgerEvent.entry_id == entry_id, LedgerEvent.kind == kind)
        .correlate_except(LedgerEvent)
    )


class LedgerEntry(Base):
    __tablename__ = "ledger_entry"
    __table_args__ = (
        CheckConstraint("(job_id IS NULL) <> (statistics_release_id IS NULL)", name="owner"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    # Whose entry it is: a training job's or a statistics release's (never both, never none).
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id"), unique=True, nullable=True)
    statistics_release_id: Mapped[int | None] = mapped_column(
        ForeignKey("statistics_release.id"), unique=True, nullable=True
    )
    # The release as a dp-accounting event (app.privacy.events.to_json): what is accounted.
    event: Mapped[dict[str, Any]] = mapped_column(JSON)
    # A statistics release's noise multipliers, one per noisy vector (None for a job).
    components: Mapped[list[float] | None] = mapped_column(JSON, nullable=True)
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
    # The patients the per-patient filter left out of the release, decided at admission
    # (``app.ledger.left_out.recorded``, salted); null on entries from before the filter
    # left anybody out (they read every patient of their dataset).
    left_out: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # A search's P(K > M): the chance it ran fewer runs than the analysed repeat-and-select
    # drew (``app.privacy.selection``); the filters take (1 + e^eps) times it out of delta.
    tail_probability: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Read-only, from the events: reserved | committed | released, and when it last changed.
    # A release after commits gives back only the unrun remainder: the entry stays committed.
    status: Mapped[EntryStatus] = column_property(
        type_coerce(
            case(
                (_has_event(COMMIT, id), COMMITTED),
                else_=_latest_event(case(STATUS_AFTER, value=LedgerEvent.kind), id),
            ),
            StrEnumColumn(EntryStatus, 16),
        )
    )
    updated_at: Mapped[datetime] = column_property(_latest_event(LedgerEvent.created_at, id))
    # Steps charged for good (None: no commit yet); a legacy commit without steps covers all.
    committed_steps: Mapped[int | None] = column_property(
        select(func.max(func.coalesce(LedgerEvent.steps, steps)))
        .where(LedgerEvent.entry_id == id, LedgerEvent.kind == COMMIT)
        .correlate_except(LedgerEvent)
        .scalar_subquery()
    )
    released: Mapped[bool] = column_property(_has_event(RELEASE, id))

    @property
    def charged_steps(self) -> int:
        """Steps that count against the budget: the whole plan until the remainder is released.

        Fails closed: anything but an explicit release keeps the full reservation.
        """
        if not self.released:
            return self.steps
        return self.committed_steps or 0


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
