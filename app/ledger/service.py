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

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.datasets.models import Dataset
from app.jobs.models import Job
from app.ledger import accounting, chain
from app.ledger.errors import BudgetExceeded
from app.ledger.models import (
    COMMIT,
    NON_PRIVATE,
    RELEASE,
    RESERVE,
    RESERVED,
    SUBSAMPLED_GAUSSIAN,
    LedgerEntry,
    LedgerEvent,
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
    return accounting.Mechanism(entry.noise_multiplier, entry.sample_rate, entry.steps)


def charged_entries(*, session: Session, dataset_id: int) -> list[LedgerEntry]:
    """Entries that count against the budget: every entry without a release event.

    Fails closed: an entry whose events are missing still counts.
    """
    released = exists().where(LedgerEvent.entry_id == LedgerEntry.id, LedgerEvent.kind == RELEASE)
    stmt = (
        select(LedgerEntry)
        .where(LedgerEntry.dataset_id == dataset_id, ~released)
        .order_by(LedgerEntry.id)
    )
    return list(session.scalars(stmt))


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
    chain.append(session=session, entry=entry, kind=RESERVE)
    return entry


def _entry_for(session: Session, job_id: int) -> LedgerEntry | None:
    return session.scalar(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).execution_options(
            populate_existing=True
        )
    )


def _transition(session: Session, job_id: int, kind: str) -> None:
    entry = _entry_for(session, job_id)
    if entry is None or entry.status != RESERVED:
        return
    lock_dataset(session=session, dataset_id=entry.dataset_id)
    entry = _entry_for(session, job_id)  # re-read under the lock: another writer may have won
    if entry is not None and entry.status == RESERVED:
        chain.append(session=session, entry=entry, kind=kind)


def commit(*, session: Session, job_id: int) -> None:
    """Make the job's charge final (it touched data; spend is never refunded)."""
    _transition(session, job_id, COMMIT)


def release(*, session: Session, job_id: int) -> None:
    """Give the reservation back: only for a job that never touched a record."""
    _transition(session, job_id, RELEASE)


def verify_chain(*, session: Session, dataset: Dataset) -> dict[str, Any]:
    """Recompute ``dataset``'s ledger hash chain; see ``chain.verify``."""
    return chain.verify(session=session, dataset_id=dataset.id)
