"""What a dataset's ledger entries spend, by the dataset's privacy filter.

Epsilon is never stored alone: it is recomputed here from the entries' dp-accounting events
(the part their charged steps spent), by the one accountant interface
(``app.privacy.accounting``), after checking that each entry can be composed as it was
recorded; nothing here tells one mechanism from another. A dataset with a budget is guarded by
a Rényi filter at one fixed order (``app.privacy.filter``): its spend is the (epsilon, delta)
that the RDP sum at that order converts to, except that a single release is worth its own
tight epsilon (the filter's first-release rule). The admission (``app.ledger.service``) and
the reports read spend here.
"""

import json
import math
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Protocol

import numpy as np
from dp_accounting.dp_event import DpEvent
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ledger.models import LedgerEntry
from app.privacy import accounting, events
from app.privacy.filter import RenyiFilter, filter_order, rdp_at

COMPOSITION_ACCOUNTANT = "rdp"
# The accountant whose single-mechanism figure the first-release rule may charge instead.
TIGHT_ACCOUNTANT = "prv"
# Accountants whose per-entry curves add up soundly under the filter (Rényi composition).
COMPOSABLE_ACCOUNTANTS = frozenset({COMPOSITION_ACCOUNTANT})


class Budgeted(Protocol):
    """What the ledger reads of a dataset: its id and its (epsilon, delta) budget.

    ``None`` for both: a public dataset without a budget.
    """

    id: int
    budget_epsilon: float | None
    budget_delta: float | None
    filter_order: float | None


class InPatientSpace(Budgeted, Protocol):
    """A budgeted dataset and the one patient fact the ledger asks of it: the patient space
    its patients are keyed in (``app.ledger.spaces``), None for one outside every space.

    The datasets domain implements it (its ``Dataset`` row) and the flows pass that in, as
    the lock passes its ``LockedBudget``: the ledger asks through its own type and never
    imports the domain that owns the patients (an import contract says so).
    """

    patient_space_id: int | None


class LedgerIntegrityError(RuntimeError):
    """An entry names a mechanism or an accountant the ledger cannot compose soundly."""


@dataclass(frozen=True)
class Spend:
    """A dataset's spend at its budget delta: composed (RDP) and the naive sum of epsilons."""

    composed_epsilon: float
    naive_epsilon: float
    budget_epsilon: float | None
    budget_delta: float | None

    @property
    def remaining_epsilon(self) -> float | None:
        if self.budget_epsilon is None:
            return None
        return max(self.budget_epsilon - self.composed_epsilon, 0.0)


def recorded_event(entry: LedgerEntry) -> DpEvent:
    """The entry's whole planned release as a dp-accounting event: the event it stores, or, for
    an entry that has none (one built in memory as entries were before events were stored),
    the event its columns record (``events.from_columns``, the reading migration 0018 used).

    Raises:
        LedgerIntegrityError: the stored event is no dp-accounting event, or the columns of an
            entry without one contradict each other.
    """
    if entry.event is None:
        return columns_event(entry)
    try:
        return _parsed(json.dumps(entry.event, sort_keys=True))
    except (ValueError, TypeError) as error:
        raise LedgerIntegrityError(f"ledger entry {entry.id}: {error}") from error


def columns_event(entry: LedgerEntry) -> DpEvent:
    """The event the entry's mechanism columns record, read as entries written before events
    were stored (chain scheme 1) are read (``events.from_columns``).

    Raises:
        LedgerIntegrityError: the columns contradict each other or name an unknown mechanism.
    """
    try:
        return events.from_columns(
            mechanism=entry.mechanism, noise_multiplier=entry.noise_multiplier,
            sample_rate=entry.sample_rate, steps=entry.steps, components=entry.components,
            release=entry.statistics_release_id is not None)
    except (ValueError, TypeError) as error:
        raise LedgerIntegrityError(f"ledger entry {entry.id}: {error}") from error


@lru_cache(maxsize=4096)
def _parsed(serialised: str) -> DpEvent:
    """Ledger entries are immutable, so each stored event is parsed once."""
    return events.from_json(json.loads(serialised))


def _check_columns(entry: LedgerEntry, event: DpEvent) -> None:
    """The entry's descriptive columns must say what its event is (where the event fixes
    them): the reports read the columns, the accountants the event."""
    said = events.describe(event)
    components = None if entry.components is None else [float(c) for c in entry.components]
    agree = (
        said.mechanism == entry.mechanism
        and (said.noise_multiplier is None
             or math.isclose(entry.noise_multiplier, said.noise_multiplier, rel_tol=1e-9))
        and said.sample_rate in (None, entry.sample_rate)
        and said.steps in (None, entry.steps)
        and (said.components is None or said.components == components)
    )
    if not agree:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: its columns ({entry.mechanism}, noise "
            f"{entry.noise_multiplier}, sample rate {entry.sample_rate}, {entry.steps} steps, "
            f"components {entry.components}) contradict its event {events.canonical(event)}"
        )


def check_entry(entry: LedgerEntry) -> None:
    """Check what the entry records before composing it: a dp-accounting event (or, for an
    entry without one, columns that make sense as they had to before events were stored),
    descriptive columns that agree with it, and an accountant that composes soundly under the
    filter.

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded.
    """
    _checked_event(entry)


def _checked_event(entry: LedgerEntry) -> DpEvent:
    """The entry's recorded event, after ``check_entry``'s checks."""
    event = recorded_event(entry)
    _check_columns(entry, event)
    if entry.accountant not in COMPOSABLE_ACCOUNTANTS:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: accountant {entry.accountant!r} cannot be composed by the "
            f"filter; known: {sorted(COMPOSABLE_ACCOUNTANTS)}"
        )
    return event


def event_of(entry: LedgerEntry, steps: int | None = None) -> DpEvent:
    """The part of the entry's event that counts: its charged steps (see charged_steps), or
    ``steps`` of it (what it held at an earlier point of its chain, for a replay).

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded, or only part of it is
            charged and its event is not a self-composition of its steps.
    """
    event = _checked_event(entry)
    held = entry.charged_steps if steps is None else steps
    try:
        return events.first_steps(event, held, entry.steps)
    except ValueError as error:
        raise LedgerIntegrityError(f"ledger entry {entry.id}: {error}") from error


def mechanism_of(entry: LedgerEntry, steps: int | None = None) -> accounting.Mechanism:
    """The charged part of the entry as one DP-SGD ``Mechanism``, for callers that search
    noise for such plans (``accounting.as_mechanism``); see ``event_of``.

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded, or its event is no
            such mechanism.
    """
    event = event_of(entry, steps)
    mechanism = accounting.as_mechanism([event])
    if mechanism is None:
        raise LedgerIntegrityError(f"ledger entry {entry.id}: its event "
                                   f"{events.canonical(event)} is no DP-SGD mechanism")
    return mechanism


def entry_rdp_at(entry: LedgerEntry, order: float, steps: int | None = None) -> float:
    """One entry's RDP at a grid ``order`` (inf when non-private), at its charged steps or at
    ``steps``."""
    return rdp_at([event_of(entry, steps)], order)


def entry_rdp_curve(entry: LedgerEntry) -> np.ndarray:
    """One entry's RDP on the fixed grid of orders."""
    return accounting.rdp_curve([event_of(entry)])


def _checked(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """The entries, after checking each and that they record one composable accountant."""
    for entry in entries:
        check_entry(entry)
    names = {entry.accountant for entry in entries}
    if len(names) > 1:
        raise LedgerIntegrityError(f"entries record different accountants: {sorted(names)}")
    return entries


def _curve(entries: list[LedgerEntry]) -> np.ndarray:
    """The entries' composed RDP on the fixed grid (a sum of curves)."""
    total = np.zeros(len(accounting.ORDERS))
    for entry in _checked(entries):
        total = total + entry_rdp_curve(entry)
    return total


def charged(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """Entries that count against the budget: all but those released before any step.

    Fails closed: an entry whose events are missing still counts in full.
    """
    return [e for e in entries if e.charged_steps > 0]


def charged_entries(*, session: Session, dataset_id: int) -> list[LedgerEntry]:
    return charged(list_entries(session=session, dataset_id=dataset_id))


def charged_by_dataset(*, session: Session,
                       dataset_ids: set[int]) -> dict[int, list[LedgerEntry]]:
    """The charged entries of several datasets (one query), by dataset id."""
    if not dataset_ids:
        return {}
    stmt = (select(LedgerEntry).where(LedgerEntry.dataset_id.in_(sorted(dataset_ids)))
            .order_by(LedgerEntry.id))
    found: dict[int, list[LedgerEntry]] = {}
    for entry in charged(list(session.scalars(stmt))):
        found.setdefault(entry.dataset_id, []).append(entry)
    return found


def list_entries(*, session: Session, dataset_id: int) -> list[LedgerEntry]:
    stmt = select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    return list(session.scalars(stmt))


def filter_of(dataset: Budgeted) -> RenyiFilter | None:
    """The dataset's Rényi filter; None for a public dataset without a budget."""
    if dataset.budget_epsilon is None or dataset.budget_delta is None:
        return None
    order = dataset.filter_order or filter_order(dataset.budget_epsilon, dataset.budget_delta)
    return RenyiFilter(dataset.budget_epsilon, dataset.budget_delta, order)


def spent_rdp(entries: list[LedgerEntry], order: float) -> float:
    """The entries' RDP at the filter's ``order`` (0 for none)."""
    return math.fsum(entry_rdp_at(e, order) for e in _checked(entries)) if entries else 0.0


def single_release_epsilon(entry: LedgerEntry, delta: float, steps: int | None = None) -> float:
    """One release alone, by the tight accountant (the filter's first-release rule, and the
    figure the release's own report gives), at its charged steps, or at ``steps``."""
    return _tight_epsilon(events.canonical(event_of(entry, steps)), delta)


@lru_cache(maxsize=4096)
def _tight_epsilon(event: str, delta: float) -> float:
    """Ledger entries are immutable, so a report recomputes each one's figure only once."""
    tight = accounting.create_accountant(TIGHT_ACCOUNTANT)
    return tight.epsilon([events.from_json(json.loads(event))], delta)


def tailed(guard: RenyiFilter, entries: list[LedgerEntry]) -> RenyiFilter:
    """``guard`` for a composition of ``entries``: its delta less what their searches' tails
    add ((1 + e^epsilon) times their summed P(K > M): a search runs min(K, M) runs, which
    differs from the analysed one only when K > M, so the composition of all of them is within
    that total variation of the analysed one). Without searches, ``guard`` itself."""
    tail = math.fsum(e.tail_probability or 0.0 for e in entries)
    if tail <= 0.0:
        return guard
    left = guard.delta - (1.0 + math.exp(min(guard.epsilon, 700.0))) * tail
    return RenyiFilter(guard.epsilon, max(left, 1e-300), guard.order)


def filtered_epsilon(guard: RenyiFilter, entries: list[LedgerEntry]) -> float:
    """The guarantee the filter gives ``entries``: RDP at its order converted at its delta,
    or, for a single release, the tighter of that and the release's own tight epsilon."""
    if not entries:
        return 0.0
    by_filter = tailed(guard, entries).epsilon_of(spent_rdp(entries, guard.order))
    if len(entries) == 1:
        return min(by_filter, single_release_epsilon(entries[0], guard.delta))
    return by_filter


def composed_epsilon(dataset: Budgeted, entries: list[LedgerEntry]) -> float:
    """The dataset's spend after ``entries``: by its filter, or, for a public dataset without
    a filter, the best RDP order at the strictest job delta (informative only)."""
    guard = filter_of(dataset)
    if guard is not None:
        return filtered_epsilon(guard, entries)
    if not entries:
        return 0.0
    return accounting.rdp_to_epsilon(_curve(entries), _spend_delta(dataset, entries))


def _spend_delta(dataset: Budgeted, entries: list[LedgerEntry]) -> float:
    if dataset.budget_delta is not None:
        return dataset.budget_delta
    # A public dataset without a budget: report at the strictest job delta.
    return min((e.delta for e in entries), default=1e-5)


@dataclass(frozen=True)
class TimelinePoint:
    """The dataset's spend right after one more charged entry (for the cumulative-spend plot)."""

    entry_id: int
    job_id: int | None
    statistics_release_id: int | None
    at: datetime
    entry_epsilon: float
    composed_epsilon: float
    naive_epsilon: float


def timeline_of(dataset: Budgeted, entries: list[LedgerEntry]) -> list[TimelinePoint]:
    """Composed (by the filter) and naive spend after each charged entry, in their order.

    Naive: basic composition, the sum of each entry's own tight epsilon at delta / K for the
    K charged entries (K releases at (eps_i, delta / K) compose to (sum eps_i, delta)); with
    one entry it is that release's own figure.
    """
    entries = charged(entries)
    delta = _spend_delta(dataset, entries)
    guard = filter_of(dataset)
    naive = total_rdp = 0.0
    points: list[TimelinePoint] = []
    for count, entry in enumerate(entries, start=1):
        alone = single_release_epsilon(entry, delta / len(entries))
        naive += alone
        if guard is None or count == 1:
            composed = composed_epsilon(dataset, entries[:count])
        else:  # the filter's running RDP sum: one order, no recomposition
            composed = guard.epsilon_of(total_rdp + spent_rdp([entry], guard.order))
        if guard is not None:
            total_rdp += spent_rdp([entry], guard.order)
        points.append(
            TimelinePoint(entry.id, entry.job_id, entry.statistics_release_id,
                          entry.created_at, alone, composed, naive)
        )
    return points


def spend_of(dataset: Budgeted, entries: list[LedgerEntry]) -> Spend:
    """The spend after the last charged entry of ``entries``."""
    entries = charged(entries)
    share = _spend_delta(dataset, entries) / max(1, len(entries))
    naive = sum(single_release_epsilon(e, share) for e in entries)  # basic composition
    composed = composed_epsilon(dataset, entries)
    return Spend(float(composed), float(naive), dataset.budget_epsilon, dataset.budget_delta)


def dataset_spend(*, session: Session, dataset: Budgeted) -> Spend:
    """Composed spend of every charged entry at the dataset's budget delta."""
    return spend_of(dataset, list_entries(session=session, dataset_id=dataset.id))
