"""The privacy ledger: admission (a Rényi privacy filter), reserve, commit, release, budgets.

Admission and reservation happen in the caller's transaction *after* taking the dataset's row
lock (an UPDATE of ``dataset.ledger_version``: a row lock on PostgreSQL, the database write lock
on SQLite), so concurrent submissions are serialised and cannot overspend together.

The ledger is append-only: a reservation inserts an entry and its ``reserve`` event; commit and
release append events, never update rows. Every event extends the dataset's hash chain
(``app.ledger.chain``), under the same lock, so the chain stays linear.
"""

import math
from typing import Any, TypeGuard

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import chain
from app.ledger import spend as ledger_spend
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
    dataset_ledger,
)
from app.ledger.spend import Budgeted
from app.privacy import accounting

COMPOSITION_ACCOUNTANT = ledger_spend.COMPOSITION_ACCOUNTANT

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
    figures = accounting.epsilon_by_accountant([mechanism], delta)
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
        epsilon_rdp=accounting.finite_or_none(figures["rdp"]),
        epsilon_prv=accounting.finite_or_none(figures["prv"]),
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
    entries = ledger_spend.charged_entries(session=session, dataset_id=dataset.id)
    after = ledger_spend.composed_epsilon([*entries, entry], budget_delta)
    if after <= budget_epsilon:
        return
    spent = ledger_spend.composed_epsilon(entries, budget_delta)
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
    charged = ledger_spend.charged_entries(session=session, dataset_id=dataset.id)
    spent = ledger_spend.composed_epsilon(charged, delta)
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
