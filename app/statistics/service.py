"""Statistics rules: plan, compute, charge and answer one release; read releases back.

One request is one release. The order matters only for what can leave: the plan and its noise
are fixed from the request and the declared schema alone; the exact aggregates and the noisy
answers are computed next, outside the dataset's lock (nothing leaves yet); then, in the one
transaction that stores the release, the ledger takes the dataset's lock, admits the release by
the dataset's filter (or refuses it: 409, and the transaction, release row included, rolls
back, so nothing is charged and nothing is answered) and commits its charge. The answers leave
only after that transaction commits (the route's unit of work commits before it responds).
"""

import math
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import Conflict, NotFound
from app.core.time import utcnow
from app.datasets import parts
from app.datasets.models import AWAITING_DATA, READY, Dataset
from app.datasets.rules import check_delta, max_delta
from app.datasets.schema import labels
from app.ledger import left_out
from app.ledger import statistics as ledger_statistics
from app.ledger.left_out import LeftOut
from app.ledger.models import LedgerEntry
from app.privacy import accounting
from app.statistics import aggregate, cohort, queries
from app.statistics import noise as release_noise
from app.statistics import plan as planning
from app.statistics.models import StatisticsRelease
from app.statistics.schemas import StatisticsCreate


class StatisticsReleaseNotFound(NotFound):
    kind, title = "statistics-release-not-found", "Statistics release not found"


class DatasetWithoutData(Conflict):
    kind, title = "dataset-without-data", "The dataset has no rows to answer from"


def check_answerable(dataset: Dataset) -> None:
    """Refuse (409, naming ``dataset_id``) a dataset without rows; nothing is charged.

    Raises:
        DatasetWithoutData: awaiting its upload, or erased.
    """
    if dataset.state == READY:
        return
    cohort.forget(dataset.id)
    hint = ("send its rows with PUT /v1/datasets/{id}/data first" if dataset.state == AWAITING_DATA
            else "its rows were erased")
    raise DatasetWithoutData(f"dataset {dataset.id} is {dataset.state}: {hint}",
                             field="dataset_id", state=dataset.state)


def _delta(dataset: Dataset, request: StatisticsCreate) -> float:
    """The target's delta (Gaussian), as a job's: the request's, else the budget's; at most
    1 / (10 n_rows). Laplace is pure: its figures are given at the budget's delta."""
    requested = request.privacy.delta
    if requested is not None:
        check_delta(requested, dataset.n_rows, field="privacy.delta")
        return requested
    if dataset.budget_delta is not None:
        return dataset.budget_delta
    return min(1e-5, max_delta(dataset.n_rows))


def _answers(dataset: Dataset, plans: list[planning.QueryPlan],
             noises: list[list[release_noise.Noise]], left: LeftOut | None
             ) -> list[dict[str, Any]]:
    """Exact aggregates of every record the release reads (``left``: the patients it leaves
    out), plus OpenDP noise, estimated (not yet released)."""
    rows = cohort.load(dataset).reading(dataset, left)
    cells = aggregate.CellIndex(rows)
    outcome = parts.schema_of(dataset).outcome.name
    found = []
    for plan, vectors in zip(plans, noises, strict=True):
        exact = queries.exact(plan, cells, outcome)
        noisy = [release_noise.draw(n, values) for n, values in zip(vectors, exact, strict=True)]
        found.append(queries.answer(plan, vectors, noisy))
    return found


def _check_outcome_held(dataset: Dataset, plans: list[planning.QueryPlan]) -> None:
    """Refuse (422, naming ``dataset_id``) a query that reads the outcome of an unlabelled
    follow-up (a prevalence, or the outcome as a column or a grouping): it has none."""
    if not labels.unlabelled(dataset):
        return
    outcome = parts.schema_of(dataset).outcome.name
    for plan in plans:
        named = {axis.column.name for axis in plan.groups}
        if plan.column is not None:
            named.add(plan.column.name)
        if outcome in named or any(v.role == "outcome" for v in plan.vectors):
            labels.check_labelled(dataset, needs=f"queries[{plan.index}]")


def release(*, session: Session, dataset: Dataset, request: StatisticsCreate
            ) -> StatisticsRelease:
    """Answer ``request`` on every record of ``dataset`` as one DP release, charged in the
    dataset's ledger in this transaction.

    Raises:
        DatasetWithoutData (409), InvalidRequest (422, naming the field; DatasetUnlabelled:
        the outcome of an unlabelled follow-up, naming ``dataset_id``), BudgetExceeded (409,
        with what is left and the largest target that fits); in each case nothing is charged.
    """
    check_answerable(dataset)
    privacy = request.privacy
    delta = _delta(dataset, request)
    plans = planning.plan(schema=parts.schema_of(dataset), request=request)
    _check_outcome_held(dataset, plans)
    noises = release_noise.calibrate(plans, mechanism=privacy.mechanism,
                                     epsilon=privacy.epsilon, delta=delta)
    event = release_noise.event(noises)
    pure = math.isfinite(accounting.pure_epsilon([event]))  # (epsilon, 0): no delta to show
    row = StatisticsRelease(
        dataset_id=dataset.id, mechanism=str(privacy.mechanism), target_epsilon=privacy.epsilon,
        delta=None if pure else delta, rows=dataset.n_rows,
        request=request.model_dump(mode="json"), answers=[],
        library=release_noise.library(), created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    charge = ledger_statistics.ReleaseCharge(event=event, delta=delta,
                                             target_epsilon=privacy.epsilon)
    entry = ledger_statistics.reserve_release(session=session, dataset=dataset,
                                              release_id=row.id, charge=charge)
    # admitted: whom it reads is decided; the answers are written in the same transaction
    row.answers = _answers(dataset, plans, noises, left_out.of(entry))
    ledger_statistics.commit_release(session=session, entry=entry)
    return row


def get(*, session: Session, release_id: int) -> StatisticsRelease:
    row = session.get(StatisticsRelease, release_id)
    if row is None:
        raise StatisticsReleaseNotFound(f"statistics release {release_id} does not exist",
                                        field="release_id")
    return row


def ledger_entry(*, session: Session, release_id: int) -> LedgerEntry | None:
    """The release's ledger entry (its charge)."""
    return session.scalar(select(LedgerEntry).where(
        LedgerEntry.statistics_release_id == release_id))


def list_page(*, session: Session, dataset_id: int, limit: int, offset: int
              ) -> tuple[list[StatisticsRelease], int]:
    """A dataset's releases, newest first."""
    query = select(StatisticsRelease).where(StatisticsRelease.dataset_id == dataset_id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(StatisticsRelease.id.desc()).limit(limit)
                           .offset(offset))
    return list(rows), total


def list_for_dataset(*, session: Session, dataset_id: int) -> list[StatisticsRelease]:
    """Every release of a dataset, oldest first (the privacy report lists them)."""
    return list(session.scalars(select(StatisticsRelease).where(
        StatisticsRelease.dataset_id == dataset_id).order_by(StatisticsRelease.id)))
