"""The privacy ledger: admission (a Rényi privacy filter), commit, release, and spend reports.

Admission and reservation happen in the caller's transaction *after* taking the dataset's row
lock (an UPDATE of ``dataset.ledger_version``: a row lock on PostgreSQL, the database write lock
on SQLite), so concurrent submissions are serialised and cannot overspend together.

The ledger is append-only: a reservation inserts an entry and its ``reserve`` event; commit and
release append events, never update rows. Every event extends the dataset's hash chain
(``app.ledger.chain``), under the same lock, so the chain stays linear.
"""

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeGuard

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import chain
from app.ledger.errors import BudgetBelowSpend, BudgetExceeded
from app.ledger.models import (
    BUDGET,
    COMMIT,
    MECHANISMS,
    NON_PRIVATE,
    RELEASE,
    RESERVE,
    RESERVED,
    SUBSAMPLED_GAUSSIAN,
    LedgerEntry,
    dataset_ledger,
)
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


def _composed_epsilon(entries: list[LedgerEntry], delta: float) -> float:
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


def lock_dataset(*, session: Session, dataset_id: int) -> None:
    """Serialise ledger writers on this dataset until the transaction ends."""
    session.execute(
        update(dataset_ledger)
        .where(dataset_ledger.c.id == dataset_id)
        .values(ledger_version=dataset_ledger.c.ledger_version + 1)
        .execution_options(synchronize_session=False)
    )


def reserve(
    *,
    session: Session,
    dataset: Budgeted,
    job_id: int,
    mechanism: accounting.Mechanism,
    clip_norm: float,
    delta: float,
) -> LedgerEntry:
    """Admit job ``job_id``'s ``mechanism`` if the composition of all charged entries plus it
    stays within budget.

    Must run in the transaction that inserts the job; takes the dataset lock first so the check
    and the insert are atomic with respect to other submissions.

    Args:
        clip_norm: the job's per-sample clip norm C (recorded with the mechanism).
        delta: the job's own delta (its reported epsilon is at this delta).

    Raises:
        BudgetExceeded: the composed spend including this job would exceed the budget.
    """
    lock_dataset(session=session, dataset_id=dataset.id)
    epsilon_rdp, epsilon_prv = (
        accounting.create_accountant(name).epsilon([mechanism], delta) for name in ("rdp", "prv")
    )
    entry = LedgerEntry(
        dataset_id=dataset.id,
        job_id=job_id,
        mechanism=NON_PRIVATE if mechanism.non_private else SUBSAMPLED_GAUSSIAN,
        noise_multiplier=mechanism.noise_multiplier,
        sample_rate=mechanism.sample_rate,
        steps=mechanism.steps,
        clip_norm=clip_norm,
        delta=delta,
        accountant=COMPOSITION_ACCOUNTANT,
        created_at=utcnow(),
        epsilon_rdp=accounting.finite_or_none(epsilon_rdp),
        epsilon_prv=accounting.finite_or_none(epsilon_prv),
    )
    _admit(session, dataset, entry)
    session.add(entry)
    session.flush()
    chain.append(session=session, dataset_id=dataset.id, entry=entry, kind=RESERVE)
    return entry


def _admit(session: Session, dataset: Budgeted, entry: LedgerEntry) -> None:
    """The filter: refuse ``entry`` if composing it with every charged entry exceeds the budget.

    The caller holds the dataset lock. A dataset without a budget (public) admits everything.

    Raises:
        BudgetExceeded: with the spend before, what remains and the composition with the job.
    """
    if dataset.budget_epsilon is None or dataset.budget_delta is None:
        return
    budget_epsilon, budget_delta = dataset.budget_epsilon, dataset.budget_delta
    # Only the composition decides admission; the "before" figures are for the refusal.
    entries = charged_entries(session=session, dataset_id=dataset.id)
    after = _composed_epsilon([*entries, entry], budget_delta)
    if after <= budget_epsilon:
        return
    spent = _composed_epsilon(entries, budget_delta)
    remaining = max(budget_epsilon - spent, 0.0)
    raise BudgetExceeded(
        f"this job would bring the dataset's composed spend to "
        f"{after:.4g} (budget {budget_epsilon:g}); "
        f"remaining epsilon is {remaining:.4g}",
        budget={"epsilon": budget_epsilon, "delta": budget_delta},
        spent_epsilon=spent,
        remaining_epsilon=remaining,
        job_epsilon=entry.epsilon_rdp,
        composed_epsilon_with_job=accounting.finite_or_none(after),
        accountant=COMPOSITION_ACCOUNTANT,
    )


def _entry_for(session: Session, job_id: int) -> LedgerEntry | None:
    return session.scalar(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).execution_options(
            populate_existing=True
        )
    )


def _locked_entry(session: Session, job_id: int) -> LedgerEntry | None:
    """The job's entry, re-read after taking its dataset's lock (another writer may have won)."""
    entry = _entry_for(session, job_id)
    if entry is None:
        return None
    lock_dataset(session=session, dataset_id=entry.dataset_id)
    return _entry_for(session, job_id)


def _committed(entry: LedgerEntry) -> int:
    return entry.committed_steps or 0


def _open(entry: LedgerEntry | None) -> TypeGuard[LedgerEntry]:
    """Still accepting commits: not released and the whole plan not yet committed."""
    return entry is not None and not entry.released and _committed(entry) < entry.steps


def _append(session: Session, entry: LedgerEntry, kind: str, steps: int | None = None) -> None:
    chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=kind,
                 steps=steps)


def commit_steps(*, session: Session, job_id: int, steps: int) -> None:
    """Charge the first ``steps`` steps for good (they ran); called after every epoch."""
    entry = _locked_entry(session, job_id)
    if _open(entry) and steps > _committed(entry):
        _append(session, entry, COMMIT, min(steps, entry.steps))


def _commit_all(session: Session, entry: LedgerEntry | None) -> None:
    if _open(entry):
        _append(session, entry, COMMIT, entry.steps)


def commit(*, session: Session, job_id: int) -> None:
    """Charge the whole plan for good: the job finished, failed or lost its worker.

    A run that touched data keeps its charge; when it is unknown how far a run got, it is
    charged in full.
    """
    _commit_all(session, _locked_entry(session, job_id))


def release(*, session: Session, job_id: int) -> None:
    """Give the whole reservation back: only for a job that never touched a record."""
    entry = _locked_entry(session, job_id)
    if entry is not None and entry.status == RESERVED:
        _append(session, entry, RELEASE)


def settle(*, session: Session, job_id: int, stopped_early: bool) -> None:
    """Close a job's entry when its worker ends it.

    Stopped at an epoch boundary (cancel, worker shutdown) after committed epochs: the unrun
    remainder is released, the committed steps stay. Anything else (success, failure, no
    epoch committed) is charged in full: a failed run may have taken steps after its last
    committed epoch.
    """
    entry = _locked_entry(session, job_id)
    if stopped_early and _open(entry) and _committed(entry) > 0:
        _append(session, entry, RELEASE)
    else:
        _commit_all(session, entry)


def _append_budget(session: Session, dataset: Budgeted) -> None:
    chain.append(
        session=session,
        dataset_id=dataset.id,
        kind=BUDGET,
        budget=(dataset.budget_epsilon, dataset.budget_delta),
    )


def record_budget(*, session: Session, dataset: Budgeted) -> None:
    """Chain the dataset's budget as registered."""
    lock_dataset(session=session, dataset_id=dataset.id)
    _append_budget(session, dataset)


def change_budget(*, session: Session, dataset: Budgeted, epsilon: float, delta: float) -> None:
    """Set and chain a new budget unless what is already spent or reserved would exceed it.

    Raises:
        BudgetBelowSpend: the composed spend at the new delta is above the new epsilon.
    """
    lock_dataset(session=session, dataset_id=dataset.id)
    session.refresh(dataset)
    spent = _composed_epsilon(charged_entries(session=session, dataset_id=dataset.id), delta)
    if spent > epsilon:
        raise BudgetBelowSpend(
            f"the dataset has already spent or reserved epsilon {spent:.4g} at delta {delta:g}; "
            f"the budget cannot go below that",
            field="epsilon",
            allowed=f"[{spent:.6g}, 100]" if math.isfinite(spent) else None,
            spent_epsilon=accounting.finite_or_none(spent),
            requested={"epsilon": epsilon, "delta": delta},
        )
    dataset.budget_epsilon, dataset.budget_delta = epsilon, delta
    session.flush()
    _append_budget(session, dataset)


def verify_chain(*, session: Session, dataset: Budgeted) -> dict[str, Any]:
    """Recompute ``dataset``'s ledger hash chain; see ``chain.verify``."""
    return chain.verify(session=session, dataset_id=dataset.id)
