"""The privacy ledger: admission (a Rényi privacy filter), reserve, commit, release, budgets.

Admission and reservation happen in the caller's transaction *after* taking the dataset's row
lock (an UPDATE of ``dataset.ledger_version``: a row lock on PostgreSQL, the database write lock
on SQLite), so concurrent submissions are serialised and cannot overspend together.

The ledger is append-only: a reservation inserts an entry and its ``reserve`` event; commit and
release append events, never update rows. Every event extends the dataset's hash chain
(``app.ledger.chain``), under the same lock, so the chain stays linear.
"""

import math
from dataclasses import dataclass
from typing import Any, NoReturn, TypeGuard

from dp_accounting import DpEvent
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import chain
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetBelowSpend, BudgetExceeded
from app.ledger.models import (
    BUDGET,
    COMMIT,
    RELEASE,
    RESERVE,
    RESERVED,
    LedgerEntry,
    dataset_ledger,
)
from app.ledger.spend import Budgeted
from app.privacy import accounting, events
from app.privacy import noise as noise_search
from app.privacy.figures import round_down
from app.privacy.filter import CITATION, RenyiFilter, filter_order

COMPOSITION_ACCOUNTANT = ledger_spend.COMPOSITION_ACCOUNTANT

@dataclass
class LockedBudget:
    """The dataset's budget as read *under* its lock: the only budget admission may check.

    A dataset object the caller loaded earlier may predate a budget change that committed
    while it waited for the lock; admitting against it would overspend the new budget.
    """

    id: int
    budget_epsilon: float | None
    budget_delta: float | None
    filter_order: float | None


def lock_dataset(*, session: Session, dataset_id: int) -> LockedBudget:
    """Serialise ledger writers on this dataset until the transaction ends; return its budget
    as of now, read after the lock was taken."""
    session.execute(
        update(dataset_ledger)
        .where(dataset_ledger.c.id == dataset_id)
        .values(ledger_version=dataset_ledger.c.ledger_version + 1)
        .execution_options(synchronize_session=False)
    )
    epsilon, delta, order = session.execute(
        select(dataset_ledger.c.budget_epsilon, dataset_ledger.c.budget_delta,
               dataset_ledger.c.filter_order)
        .where(dataset_ledger.c.id == dataset_id)
        .execution_options(populate_existing=True)
    ).one()
    return LockedBudget(dataset_id, epsilon, delta, order)


def reserve(
    *,
    session: Session,
    dataset: Budgeted,
    job_id: int,
    event: DpEvent | accounting.Mechanism,
    clip_norm: float,
    delta: float,
) -> LedgerEntry:
    """Admit job ``job_id``'s training ``event`` if the composition of all charged entries plus
    it stays within budget.

    Must run in the transaction that inserts the job; takes the dataset lock first so the check
    and the insert are atomic with respect to other submissions, and admits against the budget
    read under that lock (``dataset`` supplies only its id).

    Args:
        event: what the training spends, as its family declares it (``Family.training_event``;
            a ``Mechanism`` stands for the DP-SGD event). A job entry is charged by steps
            (a run that stops early commits the steps that touched data), so the event must be
            step-composed: ``steps`` self-compositions of one Poisson-subsampled step.
        clip_norm: the job's per-sample clip norm C (recorded with the mechanism).
        delta: the job's own delta (its reported epsilon is at this delta).

    Raises:
        BudgetExceeded: the composed spend including this job would exceed the budget.
        ValueError: the event is not step-composed (a family bug, not a request's).
    """
    event = event.event if isinstance(event, accounting.Mechanism) else event
    said = events.describe(event)
    if said.noise_multiplier is None or said.sample_rate is None or said.steps is None:
        raise ValueError(f"a job's training event must be step-composed, not {said.mechanism}")
    budget = lock_dataset(session=session, dataset_id=dataset.id)
    figures = accounting.epsilon_by_accountant([event], delta)
    entry = LedgerEntry(
        dataset_id=dataset.id,
        job_id=job_id,
        event=events.to_json(event),
        mechanism=said.mechanism,
        noise_multiplier=said.noise_multiplier,
        sample_rate=said.sample_rate,
        steps=said.steps,
        clip_norm=clip_norm,
        delta=delta,
        accountant=COMPOSITION_ACCOUNTANT,
        created_at=utcnow(),
        epsilon_rdp=accounting.finite_or_none(figures["rdp"]),
        epsilon_prv=accounting.finite_or_none(figures["prv"]),
    )
    _admit(session, budget, entry)
    session.add(entry)
    session.flush()
    chain.append(session=session, dataset_id=dataset.id, entry=entry, kind=RESERVE)
    return entry


@dataclass(frozen=True)
class Shortfall:
    """Why the filter refuses an entry: its filter, the charged entries and their RDP."""

    guard: RenyiFilter
    entries: list[LedgerEntry]
    spent: float  # RDP of the charged entries at the filter's order

    def spend_after(self, entry: LedgerEntry) -> float:
        """The (epsilon, delta) the filter would give the entries plus ``entry``."""
        return self.guard.epsilon_of(self.spent + ledger_spend.spent_rdp([entry],
                                                                         self.guard.order))

    @property
    def spent_epsilon(self) -> float:
        return ledger_spend.filtered_epsilon(self.guard, self.entries)


def shortfall(*, session: Session, dataset: Budgeted, entry: LedgerEntry) -> Shortfall | None:
    """The filter (``app.privacy.filter``), for any entry (a job's or a statistics release's):
    None (admitted) if the RDP of every charged entry plus ``entry``, at the dataset's fixed
    order, stays within the budget's bound, or if it is the first charged entry and its own
    tight epsilon fits the budget; else what the refusal reports.

    The caller holds the dataset lock. A dataset without a budget (public) admits everything.
    """
    guard = ledger_spend.filter_of(dataset)
    if guard is None:
        return None
    entries = ledger_spend.charged_entries(session=session, dataset_id=dataset.id)
    spent = ledger_spend.spent_rdp(entries, guard.order)
    if guard.admits(spent, ledger_spend.spent_rdp([entry], guard.order)):
        return None
    if not entries and ledger_spend.single_release_epsilon(entry, guard.delta) <= guard.epsilon:
        return None
    return Shortfall(guard, entries, spent)


def _admit(session: Session, dataset: Budgeted, entry: LedgerEntry) -> None:
    """Admit a job's ``entry`` by the filter (``shortfall``).

    Raises:
        BudgetExceeded: with the spend so far, what remains, and the largest target epsilon
            (at the job's delta, for the same sample rate and steps) that would fit now.
    """
    refused = shortfall(session=session, dataset=dataset, entry=entry)
    if refused is not None:
        _refuse(refused, entry)


def _largest_fitting_target(
    guard: RenyiFilter, entries: list[LedgerEntry], entry: LedgerEntry, spent: float
) -> float | None:
    """The largest target epsilon (at the entry's delta, same sample rate and steps) that the
    filter would admit now, rounded down; None when no allowed noise fits."""
    noise = guard.largest_fitting_noise(spent, entry.sample_rate, entry.steps)
    if not entries:  # the first-release rule may allow less noise
        alone = noise_search.noise_for_target(
            target_epsilon=guard.epsilon, delta=guard.delta, sample_rate=entry.sample_rate,
            steps=entry.steps, accountant=ledger_spend.TIGHT_ACCOUNTANT,
        ) if _reachable(guard, entry) else None
        noise = alone if noise is None else noise if alone is None else min(noise, alone)
    if noise is None:
        return None
    mechanism = accounting.Mechanism(noise, entry.sample_rate, entry.steps)
    target = accounting.create_accountant(ledger_spend.TIGHT_ACCOUNTANT).epsilon(
        [mechanism], entry.delta
    )
    return round_down(target) if math.isfinite(target) else None


def _reachable(guard: RenyiFilter, entry: LedgerEntry) -> bool:
    largest = accounting.Mechanism(accounting.MAX_NOISE_MULTIPLIER, entry.sample_rate, entry.steps)
    tight = accounting.create_accountant(ledger_spend.TIGHT_ACCOUNTANT)
    return tight.epsilon([largest], guard.delta) <= guard.epsilon


def over_budget(refused: Shortfall, entry: LedgerEntry, *, release: str,
                largest: float | None, fits: str) -> BudgetExceeded:
    """The 409 of a refused release (a job, a statistics release): what the dataset has spent,
    what remains, what the release would bring it to, and the largest target that fits.

    Args:
        release: what is refused, in words: "job" (its members ``job_epsilon`` and
            ``composed_epsilon_with_job``) or "statistics release" (``release_epsilon`` and
            ``composed_epsilon_with_release``). Every member is a literal keyword: the release
            inventory's test enumerates each error body's members from the source.
    """
    guard = refused.guard
    after, before = refused.spend_after(entry), refused.spent_epsilon
    remaining = max(guard.epsilon - before, 0.0)
    own, composed = entry.epsilon_prv, accounting.finite_or_none(after)
    figures: dict[str, Any] = (
        {"job_epsilon": own, "composed_epsilon_with_job": composed} if release == "job"
        else {"release_epsilon": own, "composed_epsilon_with_release": composed})
    return BudgetExceeded(
        f"this {release} would bring the dataset's composed spend to {after:.4g} (budget "
        f"{guard.epsilon:g}); remaining epsilon is {remaining:.4g}; {fits}",
        budget={"epsilon": guard.epsilon, "delta": guard.delta},
        spent_epsilon=before,
        remaining_epsilon=remaining,
        largest_fitting_target_epsilon=largest,
        **figures,
        accountant=COMPOSITION_ACCOUNTANT,
        filter={"kind": "renyi", "order": guard.order, "citation": CITATION},
    )


def _refuse(refused: Shortfall, entry: LedgerEntry) -> NoReturn:
    largest = _largest_fitting_target(refused.guard, refused.entries, entry, refused.spent)
    fits = (f"the largest target epsilon that fits now is {largest:g}" if largest is not None
            else "no noise level up to the maximum fits this plan: take fewer steps")
    raise over_budget(refused, entry, release="job", largest=largest, fits=fits)


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
    order = ledger_spend.filter_of(dataset)
    # The filter's order is fixed at registration; only the bound moves with the budget.
    guard = RenyiFilter(epsilon, delta, order.order if order else filter_order(epsilon, delta))
    spent = ledger_spend.filtered_epsilon(guard, charged)
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
    dataset.filter_order = guard.order
    session.flush()
    _append_budget(session, dataset)


def verify_chain(*, session: Session, dataset: Budgeted) -> dict[str, Any]:
    """Recompute ``dataset``'s ledger hash chain; see ``chain.verify``."""
    return chain.verify(session=session, dataset_id=dataset.id)
