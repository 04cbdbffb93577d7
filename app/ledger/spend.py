"""What a dataset's ledger entries spend, by the dataset's privacy filter.

Epsilon is never stored alone: it is recomputed here from the entries' mechanisms (noise
multiplier, sample rate, charged steps), after checking that each entry can be composed as it
was recorded. A dataset with a budget is guarded by a Rényi filter at one fixed order
(``app.privacy.filter``): its spend is the (epsilon, delta) that the RDP sum at that order
converts to, except that a single release is worth its own tight epsilon (the filter's
first-release rule). The admission (``app.ledger.service``) and the reports read spend here.
"""

import math
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Protocol

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ledger.models import (
    JOB_MECHANISMS,
    LAPLACE_RELEASE,
    NON_PRIVATE,
    RELEASE_MECHANISMS,
    LedgerEntry,
)
from app.privacy import accounting, mechanisms
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


def _check_release(entry: LedgerEntry) -> None:
    """A statistics release's entry: positive components that its noise multiplier, one step
    at sample rate 1, agrees with (``app.privacy.mechanisms``)."""
    components = entry.components or []
    if not components or not all(isinstance(c, int | float) and 0 < c < math.inf
                                 for c in components):
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: a {entry.mechanism} release needs positive components"
        )
    expected = mechanisms.equivalent_multiplier(entry.mechanism, components)
    if (entry.sample_rate != 1.0 or entry.steps != 1
            or not math.isclose(entry.noise_multiplier, expected, rel_tol=1e-9)):
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: noise {entry.noise_multiplier}, sample rate "
            f"{entry.sample_rate} and {entry.steps} steps contradict its {entry.mechanism} "
            f"components (noise {expected:.6g}, sample rate 1, one step)"
        )


def check_entry(entry: LedgerEntry) -> None:
    """Check what the entry records before composing it: a mechanism known for its owner (a
    job or a statistics release) whose parameters agree with its name (non-private exactly
    when the noise is zero; a release's components), and an accountant that composes soundly
    under the filter.

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded.
    """
    release = entry.statistics_release_id is not None
    known = RELEASE_MECHANISMS if release else JOB_MECHANISMS
    if entry.mechanism not in known:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: unknown mechanism {entry.mechanism!r} for a "
            f"{'statistics release' if release else 'job'}"
        )
    if release:
        _check_release(entry)
    elif (entry.noise_multiplier <= 0.0) != (entry.mechanism == NON_PRIVATE):
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: noise {entry.noise_multiplier} contradicts its mechanism "
            f"{entry.mechanism!r}"
        )
    if entry.accountant not in COMPOSABLE_ACCOUNTANTS:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: accountant {entry.accountant!r} cannot be composed by the "
            f"filter; known: {sorted(COMPOSABLE_ACCOUNTANTS)}"
        )


def mechanism_of(entry: LedgerEntry, steps: int | None = None) -> accounting.Mechanism:
    """The part of the entry's mechanism that counts: its charged steps (see charged_steps),
    or ``steps`` of it (what it held at an earlier point of its chain, for a replay).

    A Gaussian statistics release is exactly one full-batch Gaussian step at its composed
    multiplier; a Laplace release is no Gaussian mechanism (see ``entry_rdp_curve``).

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded, or is a Laplace
            release.
    """
    check_entry(entry)
    if entry.mechanism == LAPLACE_RELEASE:
        raise LedgerIntegrityError(f"ledger entry {entry.id}: a Laplace release has no "
                                   "Gaussian mechanism; compose it by its RDP")
    held = entry.charged_steps if steps is None else steps
    return accounting.Mechanism(entry.noise_multiplier, entry.sample_rate, held)


def _laplace_components(entry: LedgerEntry, steps: int | None = None) -> list[float]:
    """A Laplace release's charged components (none if it was released before it ran)."""
    check_entry(entry)
    held = entry.charged_steps if steps is None else steps
    return list(entry.components or []) if held > 0 else []


def entry_rdp_at(entry: LedgerEntry, order: float, steps: int | None = None) -> float:
    """One entry's RDP at a grid ``order`` (inf when non-private), at its charged steps or at
    ``steps``."""
    if entry.mechanism != LAPLACE_RELEASE:
        return rdp_at([mechanism_of(entry, steps)], order)
    components = _laplace_components(entry, steps)
    if not components:
        return 0.0
    return float(mechanisms.component_rdp(LAPLACE_RELEASE, components, np.array([order]))[0])


def entry_rdp_curve(entry: LedgerEntry) -> np.ndarray:
    """One entry's RDP on the fixed grid of orders."""
    if entry.mechanism != LAPLACE_RELEASE:
        return accounting.rdp_curve([mechanism_of(entry)])
    components = _laplace_components(entry)
    if not components:
        return np.zeros(len(accounting.ORDERS))
    return mechanisms.component_rdp(LAPLACE_RELEASE, components, accounting.ORDERS)


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
    figure the release's own report gives); a Laplace release by the tighter of its pure
    epsilon and its RDP conversion at ``delta``. At its charged steps, or at ``steps``."""
    if entry.mechanism == LAPLACE_RELEASE:
        components = _laplace_components(entry, steps)
        if not components:
            return 0.0
        curve = mechanisms.component_rdp(LAPLACE_RELEASE, components, accounting.ORDERS)
        return min(mechanisms.laplace_epsilon(components),
                   accounting.rdp_to_epsilon(curve, delta))
    m = mechanism_of(entry, steps)
    return _tight_epsilon(m.noise_multiplier, m.sample_rate, m.steps, delta)


@lru_cache(maxsize=4096)
def _tight_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float
                   ) -> float:
    """Ledger entries are immutable, so a report recomputes each one's figure only once."""
    mechanism = accounting.Mechanism(noise_multiplier, sample_rate, steps)
    return accounting.create_accountant(TIGHT_ACCOUNTANT).epsilon([mechanism], delta)


def filtered_epsilon(guard: RenyiFilter, entries: list[LedgerEntry]) -> float:
    """The guarantee the filter gives ``entries``: RDP at its order converted at its delta,
    or, for a single release, the tighter of that and the release's own tight epsilon."""
    if not entries:
        return 0.0
    by_filter = guard.epsilon_of(spent_rdp(entries, guard.order))
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
