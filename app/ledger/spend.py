"""What a dataset's ledger entries spend: each entry composed with the accountant it records.

Epsilon is never stored alone: it is recomputed here from the entries' mechanisms (noise
multiplier, sample rate, charged steps), after checking that each entry can be composed as it
was recorded. The admission filter (``app.ledger.service``) and the reports read spend here.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ledger.models import MECHANISMS, NON_PRIVATE, LedgerEntry
from app.privacy import accounting

COMPOSITION_ACCOUNTANT = "rdp"
# Accountants whose per-entry curves add up soundly under the filter (Rényi composition).
COMPOSABLE_ACCOUNTANTS = frozenset({COMPOSITION_ACCOUNTANT})


class Budgeted(Protocol):
    """What the ledger reads of a dataset: its id and its (epsilon, delta) budget.

    ``None`` for both: a public dataset without a budget.
    """

    id: int
    budget_epsilon: float | None
    budget_delta: float | None


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


def mechanism_of(entry: LedgerEntry) -> accounting.Mechanism:
    """The part of the entry's mechanism that counts: its charged steps (see charged_steps).

    Checks what the entry records before composing it: a known mechanism whose parameters
    agree with its name (non-private exactly when the noise is zero), and an accountant that
    composes soundly under the filter.

    Raises:
        LedgerIntegrityError: the entry cannot be composed as recorded.
    """
    if entry.mechanism not in MECHANISMS:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: unknown mechanism {entry.mechanism!r}"
        )
    mechanism = accounting.Mechanism(entry.noise_multiplier, entry.sample_rate, entry.charged_steps)
    if mechanism.non_private != (entry.mechanism == NON_PRIVATE):
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: noise {entry.noise_multiplier} contradicts its mechanism "
            f"{entry.mechanism!r}"
        )
    if entry.accountant not in COMPOSABLE_ACCOUNTANTS:
        raise LedgerIntegrityError(
            f"ledger entry {entry.id}: accountant {entry.accountant!r} cannot be composed by the "
            f"filter; known: {sorted(COMPOSABLE_ACCOUNTANTS)}"
        )
    return mechanism


def _compose(entries: list[LedgerEntry], delta: float) -> float:
    """Epsilon at ``delta`` of the entries' mechanisms under the accountant they record.

    Every entry of a dataset records the filter's accountant (``COMPOSITION_ACCOUNTANT``); the
    accountant is looked up by name from that record, never assumed.
    """
    mechanisms = [mechanism_of(e) for e in entries]
    names = {entry.accountant for entry in entries}
    if len(names) > 1:
        raise LedgerIntegrityError(f"entries record different accountants: {sorted(names)}")
    return accounting.create_accountant(names.pop()).epsilon(mechanisms, delta)


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


def composed_epsilon(entries: list[LedgerEntry], delta: float) -> float:
    """RDP composition of ``entries`` at ``delta`` (the filter's measure of spend)."""
    if not entries:
        return 0.0
    return _compose(entries, delta)


def _spend_delta(dataset: Budgeted, entries: list[LedgerEntry]) -> float:
    if dataset.budget_delta is not None:
        return dataset.budget_delta
    # A public dataset without a budget: report at the strictest job delta.
    return min((e.delta for e in entries), default=1e-5)


@dataclass(frozen=True)
class TimelinePoint:
    """The dataset's spend right after one more charged entry (for the cumulative-spend plot)."""

    entry_id: int
    job_id: int
    at: datetime
    entry_epsilon: float
    composed_epsilon: float
    naive_epsilon: float


def timeline_of(dataset: Budgeted, entries: list[LedgerEntry]) -> list[TimelinePoint]:
    """Composed (RDP) and naive spend after each charged entry of ``entries``, in their order.

    One RDP curve per entry, summed as it goes: the composition after each entry costs one
    conversion, not a recomposition of every entry before it.
    """
    entries = charged(entries)
    delta = _spend_delta(dataset, entries)
    total = np.zeros(len(accounting.RDP_ORDERS))
    naive = 0.0
    points: list[TimelinePoint] = []
    for entry in entries:
        curve = accounting.rdp_curve([mechanism_of(entry)])
        total = total + curve
        alone = accounting.rdp_to_epsilon(curve, delta)
        naive += alone
        composed = accounting.rdp_to_epsilon(total, delta)
        points.append(
            TimelinePoint(entry.id, entry.job_id, entry.created_at, alone, composed, naive)
        )
    return points


def spend_of(dataset: Budgeted, entries: list[LedgerEntry]) -> Spend:
    """The spend after the last charged entry of ``entries``: the timeline's end."""
    points = timeline_of(dataset, entries)
    composed, naive = (points[-1].composed_epsilon, points[-1].naive_epsilon) if points else (0, 0)
    return Spend(float(composed), float(naive), dataset.budget_epsilon, dataset.budget_delta)


def dataset_spend(*, session: Session, dataset: Budgeted) -> Spend:
    """Composed spend of every charged entry at the dataset's budget delta."""
    return spend_of(dataset, list_entries(session=session, dataset_id=dataset.id))
