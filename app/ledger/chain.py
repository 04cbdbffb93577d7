"""The ledger's hash chain: append a record under the dataset lock, and verify a dataset's chain.

Every ``ledger_event`` carries ``hash = sha256(canonical_json(content) + prev_hash)``, where
``prev_hash`` is the hash of the previous event of the *same dataset* (genesis: 64 zeros) and
``seq`` numbers a dataset's events 1, 2, 3, ... A reserve event's content includes its
``ledger_entry`` (the mechanism parameters), so editing an entry breaks the chain at its reserve
event. The dataset row keeps the chain head (seq, hash), so deleting trailing records shows too.

What each record's hash covers, under each hash scheme, is ``app.ledger.hashing``. Schemes
never go back along a chain; where a chain moves from scheme 1 to 2 after entries were
reserved, the first scheme-2 record is a ``scheme`` record (appended by migration 0018) whose
content commits to the event of every entry reserved before it: ``verify`` recomputes it, and
checks that each such event is exactly the one its entry's scheme-1 columns record. No record
is ever re-written: the history as it was hashed stays verifiable, and the events read from
then on are covered too.

The chain is tamper-evident, not tamper-proof: whoever can write to the database can also
recompute every hash. Recording ``head_hash`` outside the database (a signed log, a ticket)
anchors the history up to that point.
"""

from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import replay
from app.ledger import spend as ledger_spend
from app.ledger.hashing import event_content, record_hash, reserved_events
from app.ledger.models import (
    BUDGET,
    COMMIT,
    CURRENT_SCHEME,
    EVENT_SCHEME,
    GENESIS_HASH,
    KINDS,
    LEGACY_SCHEME,
    RELEASE,
    RESERVE,
    SCHEME,
    LedgerEntry,
    LedgerEvent,
    dataset_ledger,
)
from app.ledger.spend import LedgerIntegrityError


def append(
    *,
    session: Session,
    dataset_id: int,
    kind: str,
    entry: LedgerEntry | None = None,
    steps: int | None = None,
    budget: tuple[float | None, float | None] | None = None,
) -> LedgerEvent:
    """Add the next record to the dataset's chain and move the dataset's head.

    The caller must hold the dataset lock (``ledger_service.lock_dataset``) so that reading the
    head and appending after it cannot interleave with another writer.
    """
    head = session.scalar(
        select(LedgerEvent)
        .where(LedgerEvent.dataset_id == dataset_id)
        .order_by(LedgerEvent.seq.desc())
        .limit(1)
    )
    seq = head.seq + 1 if head is not None else 1
    prev_hash = head.hash if head is not None else GENESIS_HASH
    # A reserve is dated with its entry, so a reserved entry's updated_at equals its created_at.
    created_at = entry.created_at if kind == RESERVE and entry is not None else utcnow()
    entry_id = entry.id if entry is not None else None
    content = event_content(
        dataset_id=dataset_id,
        entry_id=entry_id,
        seq=seq,
        kind=kind,
        created_at=created_at,
        entry=entry if kind == RESERVE else None,
        steps=steps,
        budget=budget,
        scheme=CURRENT_SCHEME,
    )
    record = LedgerEvent(
        dataset_id=dataset_id,
        entry_id=entry_id,
        seq=seq,
        kind=kind,
        created_at=created_at,
        steps=steps,
        budget_epsilon=budget[0] if budget else None,
        budget_delta=budget[1] if budget else None,
        scheme=CURRENT_SCHEME,
        prev_hash=prev_hash,
        hash=record_hash(content, prev_hash),
    )
    session.add(record)
    session.flush()
    session.execute(
        update(dataset_ledger)
        .where(dataset_ledger.c.id == dataset_id)
        .values(ledger_head_seq=seq, ledger_head_hash=record.hash)
        .execution_options(synchronize_session=False)
    )
    if entry is not None:
        session.expire(entry, ["status", "updated_at", "committed_steps", "released"])
    return record


@dataclass
class _EntryState:
    """An entry's state while replaying its records: committed steps, and whether it closed."""

    committed: int | None = None  # None: no commit yet; a legacy commit covers the whole plan
    released: bool = False


@dataclass
class _Walk:
    """What verifying a chain carries from record to record."""

    states: dict[int, _EntryState] = field(default_factory=dict)
    scheme: int | None = None  # the scheme of the last record (None: none yet)
    reserved: list[LedgerEntry] = field(default_factory=list)  # so far, in chain order
    uncovered: bool = False  # entries reserved under scheme 1 whose events no record covers


def _record_content(record: LedgerEvent, entry: LedgerEntry | None,
                    reserved: list[LedgerEntry]) -> dict[str, Any]:
    budget = (record.budget_epsilon, record.budget_delta) if record.kind == BUDGET else None
    return event_content(
        dataset_id=record.dataset_id,
        entry_id=record.entry_id,
        seq=record.seq,
        kind=record.kind,
        created_at=record.created_at,
        entry=entry if record.kind == RESERVE else None,
        steps=record.steps,
        budget=budget,
        scheme=record.scheme,
        events=reserved_events(reserved) if record.kind == SCHEME else None,
    )


def _scheme_change(record: LedgerEvent, walk: _Walk) -> str | None:
    """Why ``record``'s scheme breaks the chain's rules, or None (see the module docstring)."""
    if record.scheme not in (LEGACY_SCHEME, EVENT_SCHEME):
        return f"unknown hash scheme {record.scheme!r}"
    previous = walk.scheme
    if previous is not None and record.scheme < previous:
        return f"a scheme-{record.scheme} record after scheme-{previous} records"
    if record.kind == SCHEME:
        if record.entry_id is not None:
            return "a scheme record names a ledger entry"
        if previous is None or record.scheme <= previous:
            return "a scheme record that changes no scheme"
        return None
    if previous is not None and record.scheme > previous and walk.uncovered:
        return (f"a scheme-{record.scheme} record follows entries reserved under scheme "
                f"{previous} without a scheme record covering their events")
    return None


def _migrated_event_mismatch(reserved: list[LedgerEntry]) -> str | None:
    """The first entry reserved under scheme 1 whose stored event is not exactly the one its
    (scheme-1 hashed) columns record."""
    for entry in reserved:
        try:
            matches = ledger_spend.recorded_event(entry) == ledger_spend.columns_event(entry)
        except LedgerIntegrityError as error:
            return str(error)
        if not matches:
            return (f"ledger_entry {entry.id}'s event is not the one its scheme-1 columns "
                    "record")
    return None


def _illegal(record: LedgerEvent, entry: LedgerEntry, state: _EntryState | None) -> str | None:
    """Why ``record`` is not a legal next step of its entry's lifecycle, or None."""
    if record.kind == RESERVE:
        return None if state is None else "a second reserve for the same entry"
    if state is None or state.released:
        return f"{record.kind} after {'release' if state else 'nothing'}"
    if record.kind == COMMIT:
        if state.committed is not None and (record.steps is None or state.committed == -1):
            return "a commit after a commit of the whole plan"
        floor = state.committed or 0
        if record.steps is not None and not floor <= record.steps <= entry.steps:
            return f"commit of {record.steps} steps outside [{floor}, {entry.steps}]"
        return None
    if state.committed == -1 or (state.committed or 0) >= entry.steps:
        return "release of an entry whose whole plan is committed"
    return None


def _check(
    record: LedgerEvent,
    expected_seq: int,
    prev_hash: str,
    entries: dict[int, LedgerEntry],
    walk: _Walk,
) -> str | None:
    """Why ``record`` breaks the chain, or None when it links and its content is intact."""
    if record.seq != expected_seq:
        if record.seq > expected_seq:
            return f"seq {expected_seq} is missing before seq {record.seq}: a record was deleted"
        return f"seq {record.seq} where seq {expected_seq} was expected: a record was inserted"
    if record.prev_hash != prev_hash:
        return "prev_hash does not match the hash of the previous record"
    if record.kind not in KINDS:
        return f"unknown record kind {record.kind!r}"
    changed = _scheme_change(record, walk)
    if changed is not None:
        return changed
    reserved = walk.reserved
    if record.kind in (BUDGET, SCHEME):
        if record.entry_id is not None:
            return f"a {record.kind} record names a ledger entry"
        entry = None
    else:
        entry = entries.get(record.entry_id) if record.entry_id is not None else None
        if entry is None:
            return f"ledger_entry {record.entry_id} is missing"
    content = _record_content(record, entry, reserved)
    if record_hash(content, record.prev_hash) != record.hash:
        what = f"or its ledger_entry {entry.id}'s " if record.kind == RESERVE and entry else ""
        what = "or an earlier-reserved entry's event " if record.kind == SCHEME else what
        return f"hash does not match the record's content {what}(changed after it was written)"
    if record.kind == SCHEME:
        return _migrated_event_mismatch(reserved)
    if entry is not None:
        illegal = _illegal(record, entry, walk.states.get(entry.id))
        if illegal is not None:
            return f"illegal transition: {illegal}"
    return None


def _apply(record: LedgerEvent, entries: dict[int, LedgerEntry], walk: _Walk) -> None:
    walk.scheme = record.scheme
    if record.kind == SCHEME:
        walk.uncovered = False
    if record.kind == RESERVE and record.entry_id is not None:
        walk.reserved.append(entries[record.entry_id])
        walk.uncovered = walk.uncovered or record.scheme < EVENT_SCHEME
    if record.entry_id is None:
        return
    states = walk.states
    state = states.setdefault(record.entry_id, _EntryState())
    if record.kind == COMMIT:
        state.committed = -1 if record.steps is None else record.steps
    elif record.kind == RELEASE:
        state.released = True


def _invalid(record_id: int | None, seq: int | None, reason: str) -> dict[str, Any]:
    return {"id": record_id, "seq": seq, "reason": reason}


def verify(*, session: Session, dataset_id: int) -> dict[str, Any]:
    """Recompute the dataset's chain from the stored rows; name the first record that breaks it,
    or the first after which the entries held more than the budget then in force
    (``app.ledger.replay``).

    Takes a shared lock on the dataset row (PostgreSQL; SQLite reads a snapshot) so the chain
    and its recorded head are read as of one moment, between appends.

    Returns:
        ``{"dataset_id", "valid", "budget_anchored", "records", "first_invalid",
        "head_hash"}``; ``first_invalid`` is ``{"id", "seq", "reason"}`` of a
        ``ledger_event`` (``id`` is None for a record that is missing, or for a ledger_entry
        that no record covers), or None.
    """
    head_seq, head_hash, budget_epsilon, budget_delta, stored_order = cast(
        tuple[int, str, float | None, float | None, float | None], session.execute(
        select(
            dataset_ledger.c.ledger_head_seq,
            dataset_ledger.c.ledger_head_hash,
            dataset_ledger.c.budget_epsilon,
            dataset_ledger.c.budget_delta,
            dataset_ledger.c.filter_order,
        )
        .where(dataset_ledger.c.id == dataset_id)
        .with_for_update(read=True)
    ).one())  # typed columns of a Core table: older mypy reads them as object
    records = list(
        session.scalars(
            select(LedgerEvent)
            .where(LedgerEvent.dataset_id == dataset_id)
            .order_by(LedgerEvent.seq, LedgerEvent.id)
        )
    )
    covered = select(LedgerEvent.entry_id).where(LedgerEvent.dataset_id == dataset_id)
    entries = {
        e.id: e
        for e in session.scalars(
            select(LedgerEntry).where(
                or_(LedgerEntry.dataset_id == dataset_id, LedgerEntry.id.in_(covered))
            )
        )
    }
    budgets = [r for r in records if r.kind == BUDGET]
    first_invalid = (
        _first_invalid(records, entries, head_seq, head_hash)
        or _uncovered_entry(dataset_id, records, entries)
        or _budget_mismatch(budgets, (budget_epsilon, budget_delta))
        or _overspent(records, entries, (budget_epsilon, budget_delta), stored_order)
    )
    return {
        "dataset_id": dataset_id,
        "valid": first_invalid is None,
        # False only for datasets registered before budgets were chained (no budget record).
        "budget_anchored": bool(budgets),
        "records": len(records),
        "first_invalid": first_invalid,
        "head_hash": records[-1].hash if records else GENESIS_HASH,
    }


def _uncovered_entry(
    dataset_id: int, records: list[LedgerEvent], entries: dict[int, LedgerEntry]
) -> dict[str, Any] | None:
    """The first of the dataset's entries that no reserve record covers, if any."""
    reserved = {r.entry_id for r in records if r.kind == RESERVE}
    uncovered = sorted(
        i for i, e in entries.items() if e.dataset_id == dataset_id and i not in reserved
    )
    if not uncovered:
        return None
    return _invalid(None, None, f"ledger_entry {uncovered[0]} is not covered by the chain")


def _overspent(
    records: list[LedgerEvent], entries: dict[int, LedgerEntry],
    budget: tuple[float | None, float | None], stored_order: float | None,
) -> dict[str, Any] | None:
    """The first record after which the chain held more than the budget then in force."""
    try:
        found = replay.first_overspend(records, entries, budget=budget,
                                       stored_order=stored_order)
    except LedgerIntegrityError as error:
        return _invalid(None, None, str(error))
    if found is None:
        return None
    record, reason = found
    return _invalid(record.id, record.seq, reason)


def _budget_mismatch(
    budgets: list[LedgerEvent], budget: tuple[float | None, float | None]
) -> dict[str, Any] | None:
    """The last budget record, if the dataset's budget differs from it (changed outside)."""
    if not budgets:
        return None
    last = budgets[-1]
    if (last.budget_epsilon, last.budget_delta) == budget:
        return None
    return _invalid(
        last.id, last.seq,
        f"the dataset's budget ({budget[0]}, {budget[1]}) differs from its last "
        f"budget record ({last.budget_epsilon}, {last.budget_delta}): changed outside "
        "the ledger",
    )


def _first_invalid(
    records: list[LedgerEvent],
    entries: dict[int, LedgerEntry],
    head_seq: int,
    head_hash: str,
) -> dict[str, Any] | None:
    prev_hash = GENESIS_HASH
    walk = _Walk()
    for expected_seq, record in enumerate(records, start=1):
        reason = _check(record, expected_seq, prev_hash, entries, walk)
        if reason is not None:
            return _invalid(record.id, record.seq, reason)
        _apply(record, entries, walk)
        prev_hash = record.hash
    last_seq = records[-1].seq if records else 0
    if last_seq < head_seq:
        return _invalid(
            None, last_seq + 1,
            f"the chain ends at seq {last_seq} but its head is seq {head_seq}: "
            "trailing records were deleted",
        )
    if last_seq > head_seq or prev_hash != head_hash:
        return _invalid(
            records[-1].id, last_seq,
            f"the chain's last record does not match its head (seq {head_seq})",
        )
    return None
