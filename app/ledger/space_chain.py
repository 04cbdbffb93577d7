"""The patient spaces' chain: every per-patient budget a space had and every change of its
blocks, hash-chained.

A per-patient budget (``app.ledger.spaces``) bounds every release on every dataset of its space,
so raising it is a privacy decision as much as raising a dataset's: it is audited (the flow
records who did it) and chained here, as a dataset's budget is in its own ledger chain
(``app.ledger.chain``). Each ``patient_space_event`` carries ``hash = sha256(canonical_json(
content) + prev_hash)`` (``app.ledger.hashing``), ``prev_hash`` being the hash of the space's
previous record (genesis: 64 zeros) and ``seq`` numbering them 1, 2, 3, ...; the space row keeps
the head (seq, hash), so deleting trailing records shows too. The first record is the budget
the space started with (migration 0020 wrote it for the spaces that existed then).

A "blocks" record (``append_blocks``, under the space lock) says how the space's blocks
(``app.ledger.spaces.PatientBlock``) changed: an upload keyed in (the dataset, the blocks it
closed, the blocks it opened with their datasets and sizes), a dataset's own block opened, or
the blocks of a dataset whose patients moved to another space closed (``append_closed``).
Its content is a budget record's (the space's budget when it was written) plus a ``blocks``
field, which budget records lack, so their hashes are as before. ``verify`` replays the block
records and checks that the live blocks in the table (not closed, size > 0) are exactly those
the chain says are live, and that every block the chain closed is closed in the table at the
time of the record that closed it (``CLOSED_SLACK``): an edited ``datasets``, ``size`` or
``closed_at`` (a block reopened, or its closing moved in time), or a block row deleted or
added, shows. The blocks from before this record kind (migration 0019's one block
per dataset, the uploads since) are chained by migration 0021: one "blocks" record per space
with live blocks, opening them all (its baseline; a space without live blocks needs none, as
the replay starts from none).

The table is append-only (updates and deletes are refused in code); as with every hash chain
in a database, whoever can write to it can also recompute every hash: recording the head hash
outside the database anchors the history up to that point.
"""

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
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
from app.core.time import as_utc, utcnow
from app.ledger.hashing import iso_utc, record_hash
from app.ledger.models import GENESIS_HASH, AppendOnlyViolation
from app.ledger.schemas import InvalidRecord, SpaceChainVerification
from app.ledger.spaces import PatientBlock, PatientSpace, UploadBlocks, live_blocks

BUDGET = "budget"
BLOCKS = "blocks"


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
    # A "blocks" record's change: {"dataset", "closed": [ids], "opened": [{id, datasets, size}]}.
    blocks: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


@event.listens_for(PatientSpaceEvent, "before_update")
@event.listens_for(PatientSpaceEvent, "before_delete")
def _refuse_change(_mapper: Any, _connection: Any, target: Any) -> None:
    raise AppendOnlyViolation(f"{type(target).__name__} rows are append-only")


def content(*, space_id: int, seq: int, kind: str, created_at: datetime, epsilon: float,
            delta: float, order: float,
            blocks: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a record's hash covers (migrations 0020 and 0021 hash their records with it too);
    ``blocks`` only for a "blocks" record, so a budget record's content is as it always was."""
    covered: dict[str, Any] = {
        "space_id": int(space_id), "seq": int(seq), "kind": str(kind),
        "created_at": iso_utc(created_at),
        "budget": {"epsilon": float(epsilon), "delta": float(delta)},
        "filter_order": float(order),
    }
    if blocks is not None:
        covered["blocks"] = blocks
    return covered


def block_change(*, dataset_id: int | None, closed: list[int],
                 opened: list[tuple[int, list[int], int]]) -> dict[str, Any]:
    """A "blocks" record's canonical ``blocks`` field: ids sorted, each opened block's
    datasets sorted (``dataset`` None: migration 0021's baseline)."""
    return {"dataset": None if dataset_id is None else int(dataset_id),
            "closed": sorted(int(b) for b in closed),
            "opened": [{"id": int(b), "datasets": sorted(map(int, datasets)),
                        "size": int(size)} for b, datasets, size in sorted(opened)]}


def _content_of(record: PatientSpaceEvent) -> dict[str, Any]:
    return content(space_id=record.space_id, seq=record.seq, kind=record.kind,
                   created_at=record.created_at, epsilon=record.budget_epsilon,
                   delta=record.budget_delta, order=record.filter_order,
                   blocks=record.blocks)


def append_budget(*, session: Session, space: PatientSpace) -> PatientSpaceEvent:
    """Chain the space's budget as it now is and move the space's head. The caller holds the
    space lock (``spaces.lock_space``), or created the space in this transaction."""
    return _append(session, space, BUDGET, None)


def append_upload(*, session: Session, space: PatientSpace, dataset_id: int,
                  placed: UploadBlocks) -> PatientSpaceEvent:
    """Chain the blocks an upload closed and opened (``spaces.apply_upload``'s answer), under
    the space lock that ``apply_upload`` was called under."""
    return _append(session, space, BLOCKS, block_change(
        dataset_id=dataset_id, closed=placed.closed, opened=placed.opened))


def append_opened(*, session: Session, space: PatientSpace, dataset_id: int,
                  block: PatientBlock) -> PatientSpaceEvent:
    """Chain a dataset's own block (``spaces.open_block``), under the space lock or in the
    transaction that created the space."""
    session.flush()  # the block's id
    return _append(session, space, BLOCKS, block_change(
        dataset_id=dataset_id, closed=[], opened=[(block.id, block.datasets, block.size)]))


def append_closed(*, session: Session, space: PatientSpace, dataset_id: int,
                  closed: list[int]) -> PatientSpaceEvent:
    """Chain blocks closed because ``dataset_id``'s patients moved to another space
    (``spaces.close_blocks``, under the space lock): the space keeps their history, nothing
    of them live."""
    return _append(session, space, BLOCKS, block_change(dataset_id=dataset_id, closed=closed,
                                                        opened=[]))


def _append(session: Session, space: PatientSpace, kind: str,
            blocks: dict[str, Any] | None) -> PatientSpaceEvent:
    # The head's number and hash only: not its blocks (an upload's can list thousands).
    head = session.execute(select(PatientSpaceEvent.seq, PatientSpaceEvent.hash)
                           .where(PatientSpaceEvent.space_id == space.id)
                           .order_by(PatientSpaceEvent.seq.desc()).limit(1)).first()
    seq = 1 if head is None else head.seq + 1
    prev_hash = GENESIS_HASH if head is None else head.hash
    created_at = utcnow()
    record = PatientSpaceEvent(
        space_id=space.id, seq=seq, kind=kind, budget_epsilon=space.budget_epsilon,
        budget_delta=space.budget_delta, filter_order=space.filter_order, blocks=blocks,
        created_at=created_at, prev_hash=prev_hash,
        hash=record_hash(content(space_id=space.id, seq=seq, kind=kind, created_at=created_at,
                                 epsilon=space.budget_epsilon, delta=space.budget_delta,
                                 order=space.filter_order, blocks=blocks), prev_hash))
    session.add(record)
    session.flush()
    session.execute(update(PatientSpace).where(PatientSpace.id == space.id)
                    .values(chain_head_seq=seq, chain_head_hash=record.hash)
                    .execution_options(synchronize_session=False))
    session.expire(space, ["chain_head_seq", "chain_head_hash"])
    return record


def records(*, session: Session, space_id: int) -> list[PatientSpaceEvent]:
    """The space's records (budgets and block changes), oldest first."""
    return list(session.scalars(select(PatientSpaceEvent)
                                .where(PatientSpaceEvent.space_id == space_id)
                                .order_by(PatientSpaceEvent.seq, PatientSpaceEvent.id)))


def verify(*, session: Session, space: PatientSpace) -> SpaceChainVerification:
    """Recompute the space's chain: each record's seq, link and hash, the head on the space
    row, that the live blocks in the table are those the block records leave live (ids,
    datasets, sizes), and that the last budget record is the budget the space has now
    (``budget_anchored``: a budget changed without its record is not)."""
    chain = records(session=session, space_id=space.id)
    broken = _first_broken(chain)
    head_hash = chain[-1].hash if chain else GENESIS_HASH
    if broken is None and (len(chain), head_hash) != (space.chain_head_seq,
                                                      space.chain_head_hash):
        broken = InvalidRecord(id=None, seq=space.chain_head_seq,
                               reason="the space's head names records that are missing")
    if broken is None:
        broken = _blocks_mismatch(session, space.id, chain)
    last = next((record for record in reversed(chain) if record.kind == BUDGET), None)
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
        elif record.kind not in (BUDGET, BLOCKS) or (record.kind == BLOCKS) != bool(
                record.blocks):
            reason = f"unknown kind {record.kind!r} or blocks where none are due"
        elif record_hash(_content_of(record), prev_hash) != record.hash:
            reason = "its hash does not match its content (the record was edited)"
        if reason is not None:
            return InvalidRecord(id=record.id, seq=record.seq, reason=reason)
        prev_hash = record.hash
    return None


def _blocks_mismatch(session: Session, space_id: int,
                     chain: list[PatientSpaceEvent]) -> InvalidRecord | None:
    """Replay the block records; the first block (by id) where they and the table disagree.
    Reasons name block ids only, never a size (an exact count: stewards read those)."""
    live: dict[int, tuple[list[int], int]] = {}
    closed: dict[int, datetime] = {}  # block id -> when the chain closed it
    opened: set[int] = set()  # every block the chain opened
    for record in chain:
        if record.kind != BLOCKS or not record.blocks:
            continue
        for block_id in record.blocks["closed"]:
            if live.pop(block_id, None) is None:
                return InvalidRecord(id=record.id, seq=record.seq, reason=(
                    f"it closes block {block_id}, which the chain does not hold live"))
            closed[block_id] = record.created_at
        for block in record.blocks["opened"]:
            opened.add(block["id"])
            if block["size"] > 0:
                live[block["id"]] = (block["datasets"], block["size"])
    table = {block.id: (list(block.datasets), block.size)
             for block in live_blocks(session=session, space_id=space_id)}
    for block_id in sorted(live.keys() | table.keys()):
        if block_id not in table:
            reason = "is live in the chain but not in the table (closed, emptied or deleted)"
        elif block_id not in live:
            reason = "is live in the table but not in the chain (added or reopened)"
        elif table[block_id][0] != live[block_id][0]:
            reason = "has datasets other than the chain's"
        elif table[block_id][1] != live[block_id][1]:
            reason = "has a size other than the chain's"
        else:
            continue
        return InvalidRecord(id=None, seq=None, reason=f"block {block_id} {reason}")
    return _closed_mismatch(session, space_id, opened, closed)


CLOSED_SLACK = timedelta(seconds=60)
"""How far a closed block's ``closed_at`` may be from the chained record that closed it: the
upload stamps the blocks, then chains its record, in one transaction."""


def _closed_mismatch(session: Session, space_id: int, opened: set[int],
                     closed: dict[int, datetime]) -> InvalidRecord | None:
    """The first block the chain opened that is closed in the table at another time than the
    chain closed it (an edited timestamp moves a block's spend in the reports' timeline), or
    that no record closed. (Blocks closed before migration 0021 chained the live ones were
    never in the chain: their rows are not checked.)"""
    table = session.execute(select(PatientBlock.id, PatientBlock.closed_at).where(
        PatientBlock.space_id == space_id, PatientBlock.closed_at.is_not(None))
        .order_by(PatientBlock.id)).all()
    for block_id, closed_at in table:
        if block_id not in opened:
            continue
        when, stamped = as_utc(closed.get(block_id)), as_utc(closed_at)
        if when is None or stamped is None:
            reason = "is closed in the table but by no record of the chain"
        elif abs(stamped - when) > CLOSED_SLACK:
            reason = "has a closed_at other than the time of the record that closed it"
        else:
            continue
        return InvalidRecord(id=None, seq=None, reason=f"block {block_id} {reason}")
    return None
