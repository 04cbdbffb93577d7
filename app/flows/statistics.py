"""DP cohort statistics' steps that cross domains: answer and charge a release with its audit
event, and list a dataset's releases.

The routes (``app.api.statistics``) call one of these and return.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.statistics import service as statistics_service
from app.statistics.schemas import StatisticsCreate, StatisticsPage
from app.statistics.views import release_view


def release(*, session: Session, dataset_id: int, request: StatisticsCreate,
            principal: Principal) -> int:
    """Answer, charge and audit in one transaction; returns the release's id (an idempotent
    replay, ``app.core.idempotency``, does none of it).

    Raises:
        DatasetNotFound; as ``statistics_service.release`` (409 when the budget cannot take it).
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    row = statistics_service.release(session=session, dataset=dataset, request=request)
    audit.record(
        session=session, principal=principal, action=Action.STATISTICS_RELEASED,
        target=f"statistics/{row.id}",
        detail={"dataset_id": dataset.id, "queries": len(request.queries),
                "epsilon": request.privacy.epsilon, "delta": row.delta,
                "mechanism": str(request.privacy.mechanism)},
    )
    return row.id


def page(*, session: Session, dataset_id: int, limit: int, offset: int) -> StatisticsPage:
    """A page of the dataset's releases, newest first, each with its ledger charge.

    Raises:
        DatasetNotFound.
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    rows, total = statistics_service.list_page(session=session, dataset_id=dataset.id,
                                               limit=limit, offset=offset)
    items = [release_view(r, statistics_service.ledger_entry(session=session, release_id=r.id))
             for r in rows]
    return StatisticsPage(items=items, total=total, limit=limit, offset=offset)
