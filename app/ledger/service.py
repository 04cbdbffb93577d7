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
from typing import Any, NoReturn, TypeGuard, cast

from dp_accounting import DpEvent
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import admission, chain, left_out, space_chain, spaces
from app.ledger import spend as ledger_spend
from app.ledger.admission import Shortfall as Shortfall
from app.ledger.admission import over_budget as over_budget
from app.ledger.admission import shortfall as shortfall
from app.ledger.errors import BudgetBelowSpend
from app.ledger.models import (
    BUDGET,
    COMMIT,
    RELEASE,
    RESERVE,
    RESERVED,
    LedgerEntry,
    dataset_ledger,
)
from app.ledger.release import Release, Scope, give_back
from app.ledger.release import commit as commit_release
from app.ledger.release import entry_of as entry_of
from app.ledger.spend import Budgeted, InPatientSpace
from app.privacy import accounting, events
from app.privacy.filter import RenyiFilter, filter_order

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
    patient_space_id: int | None = None


def lock_dataset(*, session: Session, dataset_id: int) -> LockedBudget:
    """Serialise ledger writers on this dataset until the transaction ends; return its budget
    as of now, read after the lock was taken.

    A dataset in a patient space takes the space's lock first (always space, then dataset):
    a release on it charges patients that other datasets of the space share.
    """
    space_id = session.execute(select(dataset_ledger.c.patient_space_id)
                               .where(dataset_ledger.c.id == dataset_id)).scalar()
    if space_id is not None:
        spaces.lock_space(session=session, space_id=space_id)
    session.execute(
        update(dataset_ledger)
        .where(dataset_ledger.c.id == dataset_id)
        .values(ledger_version=dataset_ledger.c.ledger_version + 1)
        .execution_options(synchronize_session=False)
    )
    epsilon, delta, order = cast(tuple[float | None, float | None, float | None],
                                 session.execute(
        select(dataset_ledger.c.budget_epsilon, dataset_ledger.c.budget_delta,
               dataset_ledger.c.filter_order)
        .where(dataset_ledger.c.id == dataset_id)
        .execution_options(populate_existing=True)
    ).one())  # typed columns of a Core table: older mypy reads them as object
    return LockedBudget(dataset_id, epsilon, delta, order, space_id)


class StepComposed:
    """A job's training (DP-SGD, a search, a federation's part, an audit's target): charged by
    steps, so its event must be ``steps`` self-compositions of one subsampled step."""

    name = "steps"

    def columns(self, said: events.Description) -> dict[str, Any]:
        if said.noise_multiplier is None or said.sample_rate is None or said.steps is None:
            raise ValueError(f"a job's training event must be step-composed, not "
                             f"{said.mechanism}")
        return {"mechanism": said.mechanism, "noise_multiplier": said.noise_multiplier,
                "sample_rate": said.sample_rate, "steps": said.steps}

    def refuse(self, refused: Shortfall, entry: LedgerEntry, release: Release) -> NoReturn:
        admission.refuse(refused, entry)


STEP_COMPOSED = StepComposed()


def reserve_release(*, session: Session, dataset: Budgeted, release: Release) -> LedgerEntry:
    """Admit ``release`` if the composition of all charged entries plus it stays within the
    dataset's (and its patients') budgets, and chain its reserve record: the one path every
    kind of spend takes.

    Must run in the transaction that inserts the release's owner; takes the dataset lock
    first so the check and the insert are atomic with respect to other writers, and admits
    against the budget read under that lock (``dataset`` supplies only its id).

    Raises:
        BudgetExceeded: by the release's kind (the largest target that fits, in its words).
        PatientIdsRequired: the dataset's patients are in a space of its own (409).
        ValueError: the event is not of its kind's shape (a caller's bug, not a request's).
    """
    columns = release.kind.columns(events.describe(release.event))
    budget = lock_dataset(session=session, dataset_id=dataset.id)
    spaces.check_keyed(session=session, space_id=budget.patient_space_id,
                       dataset_id=dataset.id)
    figures = accounting.epsilon_by_accountant([release.event], release.delta)
    entry = LedgerEntry(
        dataset_id=dataset.id, **release.scope.columns(), event=events.to_json(release.event),
        **columns, clip_norm=release.clip_norm, delta=release.delta,
        accountant=COMPOSITION_ACCOUNTANT, created_at=utcnow(),
        epsilon_rdp=accounting.finite_or_none(figures["rdp"]),
        epsilon_prv=accounting.finite_or_none(figures["prv"]),
        tail_probability=release.tail_probability,
    )
    refused = shortfall(session=session, dataset=budget, entry=entry)
    if refused is not None:
        release.kind.refuse(refused, entry, release)
    leave_out(session=session, dataset=budget, entry=entry)
    session.add(entry)
    session.flush()
    chain.append(session=session, dataset_id=dataset.id, entry=entry, kind=RESERVE)
    return entry


def reserve(
    *,
    session: Session,
    dataset: Budgeted,
    scope: Scope,
    event: DpEvent | accounting.Mechanism,
    clip_norm: float,
    delta: float,
    tail_probability: float | None = None,
) -> LedgerEntry:
    """Reserve ``scope``'s training ``event`` (``reserve_release`` with a step-composed kind).

    Args:
        event: what the training spends, as its family declares it (``Family.training_event``;
            a ``Mechanism`` stands for the DP-SGD event). A job entry is charged by steps
            (a run that stops early commits the steps that touched data), so the event must be
            step-composed: ``steps`` self-compositions of one Poisson-subsampled step.
        clip_norm: the job's per-sample clip norm C (recorded with the mechanism).
        delta: the job's own delta (its reported epsilon is at this delta).
        tail_probability: a search's P(K > M) (``app.privacy.selection``): recorded, and
            taken out of every filter's delta that composes the entry (``spend.tailed``).

    Raises:
        as ``reserve_release``.
    """
    event = event.event if isinstance(event, accounting.Mechanism) else event
    return reserve_release(session=session, dataset=dataset, release=Release(
        scope=scope, event=event, delta=delta, kind=STEP_COMPOSED,
        clip_norm=clip_norm, tail_probability=tail_probability))


def leave_out(*, session: Session, dataset: InPatientSpace, entry: LedgerEntry) -> None:
    """Record on an admitted ``entry``, before it is chained, the patients its release leaves
    out (``admission.patients_left_out``); the caller holds the dataset lock."""
    found = admission.patients_left_out(session=session, dataset=dataset, entry=entry)
    entry.left_out = left_out.recorded(found)


def left_out_of(*, session: Session, scope: Scope) -> left_out.LeftOut | None:
    """The patients ``scope``'s release leaves out (None: none, or no entry)."""
    entry = entry_of(session=session, scope=scope)
    return None if entry is None else left_out.of(entry)


def _locked_entry(session: Session, scope: Scope) -> LedgerEntry | None:
    """The scope's entry, re-read after taking its dataset's lock (another writer may have won)."""
    entry = entry_of(session=session, scope=scope)
    if entry is None:
        return None
    lock_dataset(session=session, dataset_id=entry.dataset_id)
    return entry_of(session=session, scope=scope)


def _committed(entry: LedgerEntry) -> int:
    return entry.committed_steps or 0


def _open(entry: LedgerEntry | None) -> TypeGuard[LedgerEntry]:
    """Still accepting commits: not released and the whole plan not yet committed."""
    return entry is not None and not entry.released and _committed(entry) < entry.steps


def _append(session: Session, entry: LedgerEntry, kind: str, steps: int | None = None) -> None:
    if kind == COMMIT:
        commit_release(session=session, entry=entry, steps=steps)
    else:
        give_back(session=session, entry=entry)


def commit_steps(*, session: Session, scope: Scope, steps: int) -> None:
    """Charge the first ``steps`` steps for good (they ran); called after every epoch."""
    entry = _locked_entry(session, scope)
    if _open(entry) and steps > _committed(entry):
        _append(session, entry, COMMIT, min(steps, entry.steps))


def _commit_all(session: Session, entry: LedgerEntry | None) -> None:
    if _open(entry):
        _append(session, entry, COMMIT, entry.steps)


def commit(*, session: Session, scope: Scope) -> None:
    """Charge the whole plan for good: the job finished, failed or lost its worker.

    A run that touched data keeps its charge; when it is unknown how far a run got, it is
    charged in full.
    """
    _commit_all(session, _locked_entry(session, scope))


def release(*, session: Session, scope: Scope) -> None:
    """Give the whole reservation back: only for a job that never touched a record."""
    entry = _locked_entry(session, scope)
    if entry is not None and entry.status == RESERVED:
        _append(session, entry, RELEASE)


def settle(*, session: Session, scope: Scope, stopped_early: bool,
           charged_ahead: bool = False) -> None:
    """Close a job's entry when its worker ends it (or its lease runs out).

    Stopped at an epoch boundary (cancel, worker shutdown) after committed epochs: the unrun
    remainder is released, the committed steps stay. Anything else (success, failure, no
    epoch committed) is charged in full: a failed run may have taken steps after its last
    committed epoch.

    ``charged_ahead``: the run commits its steps BEFORE it takes them (a federation's site
    commits each round as it starts, ``worker.federated_site``), so no step ever ran beyond
    the committed ones: whatever way it ends, the remainder is released and the committed
    steps stay.
    """
    entry = _locked_entry(session, scope)
    if charged_ahead or (stopped_early and _open(entry) and _committed(entry) > 0):
        if _open(entry):
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


def change_budget(*, session: Session, dataset: InPatientSpace, epsilon: float,
                  delta: float) -> None:
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
    _follow_in_own_space(session, dataset, epsilon, delta)
    session.flush()
    _append_budget(session, dataset)


def _follow_in_own_space(session: Session, dataset: InPatientSpace, epsilon: float,
                         delta: float) -> None:
    """A dataset alone in a space of its own (from before spaces) is its patients' only table:
    its budget is their per-patient budget, and moves with it (the change is chained in the
    dataset's ledger). An organisation's budget does not move with one table, nor a seed's
    shared by several (``app.datasets.service`` moves a seed's held by one)."""
    space_id = dataset.patient_space_id
    space = None if space_id is None else session.get(spaces.PatientSpace, space_id)
    if space is not None and space.kind == spaces.SpaceKind.DATASET:
        space.budget_epsilon, space.budget_delta = epsilon, delta
        session.flush()
        space_chain.append_budget(session=session, space=space)  # the space's chain too


def verify_chain(*, session: Session, dataset: Budgeted) -> dict[str, Any]:
    """Recompute ``dataset``'s ledger hash chain; see ``chain.verify``."""
    return chain.verify(session=session, dataset_id=dataset.id)
