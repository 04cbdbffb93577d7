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
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.datasets.models import Dataset
from app.jobs.models import Job
from app.ledger import accounting, chain
from app.ledger.errors import BudgetBelowSpend, BudgetExceeded
from app.ledger.models import (
    BUDGET,
    COMMIT,
    NON_PRIVATE,
    RELEASE,
    RESERVE,
    RESERVED,
    SUBSAMPLED_GAUSSIAN,
    LedgerEntry,
)

COMPOSITION_ACCOUNTANT = "rdp"


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
    """The part of the entry's mechanism that counts: its charged steps (see charged_steps)."""
    return accounting.Mechanism(entry.noise_multiplier, entry.sample_rate, entry.charged_steps)


def charged_entries(*, session: Session, dataset_id: int) -> list[LedgerEntry]:
    """Entries that count against the budget: all but those released before any step.

    Fails closed: an entry whose events are missing still counts in full.
    """
    entries = list_entries(session=session, dataset_id=dataset_id)
    return [e for e in entries if e.charged_steps > 0]


def list_entries(*, session: Session, dataset_id: int) -> list[LedgerEntry]:
    stmt = select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)
    return list(session.scalars(stmt))


def _composed_epsilon(dataset: Dataset, entries: list[LedgerEntry]) -> float:
    """RDP composition of ``entries`` at the budget delta (the filter's measure of spend)."""
    if not entries:
        return 0.0
    return accounting.RDPAccountant().epsilon(
        [mechanism_of(e) for e in entries], _spend_delta(dataset, entries)
    )


def _spend_delta(dataset: Dataset, entries: list[LedgerEntry]) -> float:
    if dataset.budget_delta is not None:
        return dataset.budget_delta
    # A public dataset without a budget: report at the strictest job delta.
    return min((e.delta for e in entries), default=1e-5)


def _spend(dataset: Dataset, entries: list[LedgerEntry]) -> Spend:
    delta = _spend_delta(dataset, entries)
    rdp = accounting.RDPAccountant()
    naive = sum(rdp.epsilon([mechanism_of(e)], delta) for e in entries)
    return Spend(
        _composed_epsilon(dataset, entries), naive, dataset.budget_epsilon, dataset.budget_delta
    )


def dataset_spend(*, session: Session, dataset: Dataset) -> Spend:
    """Composed spend of every charged entry at the dataset's budget delta."""
    return _spend(dataset, charged_entries(session=session, dataset_id=dataset.id))


@dataclass(frozen=True)
class TimelinePoint:
    """The dataset's spend right after one more charged entry (for the cumulative-spend plot)."""

    entry_id: int
    job_id: int
    at: datetime
    entry_epsilon: float
    composed_epsilon: float
    naive_epsilon: float


def spend_timeline(*, session: Session, dataset: Dataset) -> list[TimelinePoint]:
    """Composed (RDP) and naive spend after each charged entry, oldest first."""
    entries = charged_entries(session=session, dataset_id=dataset.id)
    delta = _spend_delta(dataset, entries)
    rdp = accounting.RDPAccountant()
    points: list[TimelinePoint] = []
    naive = 0.0
    for i, entry in enumerate(entries):
        alone = rdp.epsilon([mechanism_of(entry)], delta)
        naive += alone
        composed = rdp.epsilon([mechanism_of(e) for e in entries[: i + 1]], delta)
        points.append(
            TimelinePoint(entry.id, entry.job_id, entry.created_at, alone, composed, naive)
        )
    return points


def lock_dataset(*, session: Session, dataset_id: int) -> None:
    """Serialise ledger writers on this dataset until the transaction ends."""
    session.execute(
        update(Dataset)
        .where(Dataset.id == dataset_id)
        .values(ledger_version=Dataset.ledger_version + 1)
        .execution_options(synchronize_session=False)
    )


def reserve(
    *,
    session: Session,
    dataset: Dataset,
    job: Job,
    epsilon_rdp: float,
    epsilon_prv: float,
) -> LedgerEntry:
    """Admit ``job`` if the composition of all charged entries plus it stays within budget.

    Must run in the transaction that inserts the job; takes the dataset lock first so the check
    and the insert are atomic with respect to other submissions.

    Raises:
        BudgetExceeded: the composed spend including this job would exceed the budget.
    """
    lock_dataset(session=session, dataset_id=dataset.id)
    entry = LedgerEntry(
        dataset_id=dataset.id,
        job_id=job.id,
        mechanism=NON_PRIVATE if job.non_private else SUBSAMPLED_GAUSSIAN,
        noise_multiplier=job.noise_multiplier,
        sample_rate=job.sample_rate,
        steps=job.steps,
        clip_norm=job.max_grad_norm,
        delta=job.delta,
        accountant=COMPOSITION_ACCOUNTANT,
        created_at=utcnow(),
        epsilon_rdp=None if math.isinf(epsilon_rdp) else epsilon_rdp,
        epsilon_prv=None if math.isinf(epsilon_prv) else epsilon_prv,
    )
    if dataset.budget_epsilon is not None:
        # Only the composition decides admission; the "before" figures are for the refusal.
        entries = charged_entries(session=session, dataset_id=dataset.id)
        after = _composed_epsilon(dataset, [*entries, entry])
        if after > dataset.budget_epsilon:
            spent = _composed_epsilon(dataset, entries)
            remaining = max(dataset.budget_epsilon - spent, 0.0)
            raise BudgetExceeded(
                f"this job would bring the dataset's composed spend to "
                f"{after:.4g} (budget {dataset.budget_epsilon:g}); "
                f"remaining epsilon is {remaining:.4g}",
                budget={"epsilon": dataset.budget_epsilon, "delta": dataset.budget_delta},
                spent_epsilon=spent,
                remaining_epsilon=remaining,
                job_epsilon=None if math.isinf(epsilon_rdp) else epsilon_rdp,
                composed_epsilon_with_job=None if math.isinf(after) else after,
                accountant=COMPOSITION_ACCOUNTANT,
            )
    session.add(entry)
    session.flush()
    chain.append(session=session, dataset_id=dataset.id, entry=entry, kind=RESERVE)
    return entry


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


def _open(entry: LedgerEntry | None) -> bool:
    """Still accepting commits: not released and the whole plan not yet committed."""
    return entry is not None and not entry.released and (entry.committed_steps or 0) < entry.steps


def commit_steps(*, session: Session, job_id: int, steps: int) -> None:
    """Charge the first ``steps`` steps for good (they ran); called after every epoch."""
    entry = _locked_entry(session, job_id)
    if _open(entry) and steps > (entry.committed_steps or 0):
        chain.append(
            session=session,
            dataset_id=entry.dataset_id,
            entry=entry,
            kind=COMMIT,
            steps=min(steps, entry.steps),
        )


def commit(*, session: Session, job_id: int) -> None:
    """Charge the whole plan for good: the job finished, failed or lost its worker.

    A run that touched data keeps its charge; when it is unknown how far a run got, it is
    charged in full.
    """
    entry = _locked_entry(session, job_id)
    if _open(entry):
        chain.append(
            session=session, dataset_id=entry.dataset_id, entry=entry, kind=COMMIT,
            steps=entry.steps,
        )


def release(*, session: Session, job_id: int) -> None:
    """Give the whole reservation back: only for a job that never touched a record."""
    entry = _locked_entry(session, job_id)
    if entry is not None and entry.status == RESERVED:
        chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=RELEASE)


def release_remainder(*, session: Session, job_id: int) -> None:
    """After a stop at an epoch boundary: the steps that never ran go back, the rest stays."""
    entry = _locked_entry(session, job_id)
    if _open(entry) and (entry.committed_steps or 0) > 0:
        chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=RELEASE)


def settle(*, session: Session, job_id: int, stopped_early: bool) -> None:
    """Close a job's entry when its worker ends it.

    Stopped at an epoch boundary (cancel, worker shutdown) after committed epochs: the unrun
    remainder is released. Anything else (success, failure, no epoch committed) is charged in
    full: a failed run may have taken steps after its last committed epoch.
    """
    entry = _locked_entry(session, job_id)
    if stopped_early and entry is not None and (entry.committed_steps or 0) > 0:
        release_remainder(session=session, job_id=job_id)
    else:
        commit(session=session, job_id=job_id)


def record_budget(*, session: Session, dataset: Dataset) -> None:
    """Chain the dataset's current budget (at registration and after every change)."""
    lock_dataset(session=session, dataset_id=dataset.id)
    chain.append(
        session=session,
        dataset_id=dataset.id,
        kind=BUDGET,
        budget=(dataset.budget_epsilon, dataset.budget_delta),
    )


def change_budget(*, session: Session, dataset: Dataset, epsilon: float, delta: float) -> Spend:
    """Set a new budget unless what is already spent or reserved would exceed it.

    Raises:
        BudgetBelowSpend: the composed spend at the new delta is above the new epsilon.
    """
    lock_dataset(session=session, dataset_id=dataset.id)
    session.refresh(dataset)
    entries = charged_entries(session=session, dataset_id=dataset.id)
    proposed = Dataset(budget_epsilon=epsilon, budget_delta=delta)
    spent = _composed_epsilon(proposed, entries)
    if spent > epsilon:
        raise BudgetBelowSpend(
            f"the dataset has already spent or reserved epsilon {spent:.4g} at delta {delta:g}; "
            f"the budget cannot go below that",
            field="epsilon",
            allowed=f"[{spent:.6g}, 100]" if math.isfinite(spent) else None,
            spent_epsilon=_finite_or_none(spent),
            requested={"epsilon": epsilon, "delta": delta},
        )
    dataset.budget_epsilon, dataset.budget_delta = epsilon, delta
    session.flush()
    record_budget(session=session, dataset=dataset)
    return _spend(dataset, entries)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def verify_chain(*, session: Session, dataset: Dataset) -> dict[str, Any]:
    """Recompute ``dataset``'s ledger hash chain; see ``chain.verify``."""
    return chain.verify(session=session, dataset_id=dataset.id)
