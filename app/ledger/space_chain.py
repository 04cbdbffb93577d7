"""The patient spaces' budget chain: every per-patient budget a space had, hash-chained.

A per-patient budget (``app.ledger.spaces``) bounds every release on every dataset of its space,
so raising it is a privacy decision as much as raising a dataset's: it is audited (the flow
records who did it) and chained here, as a dataset's budget is in its own ledger chain
(``app.ledger.chain``). Each ``patient_space_event`` carries ``hash = sha256(canonical_json(
content) + prev_hash)`` (``app.ledger.hashing``), ``prev_hash`` being the hash of the space's
previous record (genesis: 64 zeros) and ``seq`` numbering them 1, 2, 3, ...; the space row keeps
the head (seq, hash), so deleting trailing records shows too. The first record is the budget
the space started with (migration 0020 wrote it for the spaces that existed then).

The table is append-only (updates and deletes are refused in code); as with every hash chain
in a database, whoever can write to it can also recompute every hash: recording the head hash
outside the database anchors the history up to that point.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    event,
    select,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column

from app.core.database import Base
from app.core.time import utcnow
from app.ledger.hashing import iso_utc, record_hash
from app.ledger.models import GENESIS_HASH, AppendOnlyViolation
from app.ledger.schemas import InvalidRecord, SpaceChainVerification
from app.ledger.spaces import PatientSpace

BUDGET = "budget"


class PatientSpaceEvent(Base):
    __tablename__ = "patient_space_event"
    __table_args__ = (UniqueConstraint("space_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space_id: Mapped[int] = mapped_column(ForeignKey("patient_space.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    filter_order: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


@event.listens_for(PatientSpaceEvent, "before_update")
@event.listens_for(PatientSpaceEvent, "before_delete")
def _refuse_change(_mapper: Any, _connection: Any, target: Any) -> None:
    raise AppendOnlyViolation(f"{type(target).__name__} rows are append-only")


def content(*, space_id: int, seq: int, kind: str, created_at: datetime, epsilon: float,
            delta: float, order: float) -> dict[str, Any]:
    """What a record's hash covers (migration 0020 hashes its first records with it too)."""
    return {
        "space_id": int(space_id), "seq": int(seq), "kind": str(kind),
        "created_at": iso_utc(created_at),
        "budget": {"epsilon": float(epsilon), "delta": float(delta)},
        "filter_order": float(order),
    }


def _content_of(record: PatientSpaceEvent) -> dict[str, Any]:
    return content(space_id=record.space_id, seq=record.seq, kind=record.kind,
                   created_at=record.created_at, epsilon=record.budget_epsilon,
                   delta=record.budget_delta, order=record.filter_order)


def append_budget(*, session: Session, space: PatientSpace) -> PatientSpaceEvent:
    """Chain the space's budget as it now is and move the space's head. The caller holds the
    space lock (``spaces.lock_space``), or created the space in this transaction."""
    head = session.scalar(select(PatientSpaceEvent).where(PatientSpaceEvent.space_id == space.id)
                          .order_by(PatientSpaceEvent.seq.desc()).limit(1))
    seq = 1 if head is None else head.seq + 1
    prev_hash = GENESIS_HASH if head is None else head.hash
    created_at = utcnow()
    record = PatientSpaceEvent(
        space_id=space.id, seq=seq, kind=BUDGET, budget_epsilon=space.budget_epsilon,
        budget_delta=space.budget_delta, filter_order=space.filter_order,
        created_at=created_at, prev_hash=prev_hash,
        hash=record_hash(content(space_id=space.id, seq=seq, kind=BUDGET, created_at=created_at,
                                 epsilon=space.budget_epsilon, delta=space.budget_delta,
                                 order=space.filter_order), prev_hash))
    session.add(record)
    session.flush()
    session.execute(update(PatientSpace).where(PatientSpace.id == space.id)
                    .values(chain_head_seq=seq, chain_head_hash=record.hash)
                    .execution_options(synchronize_session=False))
    session.expire(space, ["chain_head_seq", "chain_head_hash"])
    return record


def records(*, session: Session, space_id: int) -> list[PatientSpaceEvent]:
    """The space's budget records, oldest first."""
    return list(session.scalars(select(PatientSpaceEvent)
                                .where(PatientSpaceEvent.space_id == space_id)
                                .order_by(PatientSpaceEvent.seq, PatientSpaceEvent.id)))


def verify(*, session: Session, space: PatientSpace) -> SpaceChainVerification:
    """Recompute the space's chain: each record's seq, link and hash, the head on the space
    row, and that the last record is the budget the space has now (``budget_anchored``: a
    budget changed without its record is not)."""
    chain = records(session=session, space_id=space.id)
    broken = _first_broken(chain)
    head_hash = chain[-1].hash if chain else GENESIS_HASH
    if broken is None and (len(chain), head_hash) != (space.chain_head_seq,
                                                      space.chain_head_hash):
        broken = InvalidRecord(id=None, seq=space.chain_head_seq,
                               reason="the space's head names records that are missing")
    last = chain[-1] if chain else None
    anchored = last is not None and (last.budget_epsilon, last.budget_delta,
                                     last.filter_order) == (space.budget_epsilon,
                                                            space.budget_delta,
                                                            space.filter_order)
    return SpaceChainVerification(valid=broken is None, budget_anchored=anchored,
                                  records=len(chain), first_invalid=broken,
                                  head_hash=head_hash)


def _first_broken(chain: list[PatientSpaceEvent]) -> InvalidRecord | None:
    prev_hash = GENESIS_HASH
    for number, record in enumerate(chain, start=1):
        reason = None
        if record.seq != number:
            reason = f"seq {record.seq} where {number} was due (a record is missing)"
        elif record.prev_hash != prev_hash:
            reason = "its prev_hash is not the previous record's hash"
        elif record.kind != BUDGET:
            reason = f"unknown kind {record.kind!r}"
        elif record_hash(_content_of(record), prev_hash) != record.hash:
            reason = "its hash does not match its content (the record was edited)"
        if reason is not None:
            return InvalidRecord(id=record.id, seq=record.seq, reason=reason)
        prev_hash = record.hash
    return None
