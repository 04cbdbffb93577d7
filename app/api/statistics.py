"""Statistics API: thin routes over app.statistics.service and app.flows.statistics (DP
cohort statistics)."""

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from sqlalchemy.orm import Session

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.idempotency import IdempotencyKey, create_once, replay_headers
from app.core.ids import MAX_ID, DatasetIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.core.schemas import register_param_range
from app.flows import statistics as statistics_flow
from app.statistics import service
from app.statistics.schemas import StatisticsCreate, StatisticsPage, StatisticsReleaseOut
from app.statistics.views import release_view

router = APIRouter(tags=["statistics"], route_class=JsonRoute)
# Data scientists and privacy officers ask and read; clinicians may not (a release spends the
# dataset's budget).
ASKERS = require_roles("data_scientist", "privacy_officer")
Asker = Annotated[Principal, ASKERS]
ReleaseIdPath = Annotated[int, register_param_range("release_id", Path(ge=1, le=MAX_ID))]


def _view(session: Session, release_id: int) -> StatisticsReleaseOut:
    row = service.get(session=session, release_id=release_id)
    return release_view(row, service.ledger_entry(session=session, release_id=row.id))


@router.post("/v1/datasets/{dataset_id}/statistics", status_code=status.HTTP_201_CREATED,
             responses=problems(404, 409))
def create_statistics(
    dataset_id: DatasetIdPath, body: StatisticsCreate, session: SessionDep, response: Response,
    principal: Asker, idempotency_key: IdempotencyKey = None,
) -> StatisticsReleaseOut:
    """Answer DP cohort statistics as one release charged to the dataset's ledger (409 when
    the budget cannot take it; ``Idempotency-Key`` makes retries safe)."""
    release_id, replayed = create_once(
        session=session, owner=principal.key_id,
        route=f"POST /v1/datasets/{dataset_id}/statistics", key=idempotency_key, body=body,
        create=lambda: statistics_flow.release(session=session, dataset_id=dataset_id,
                                               request=body, principal=principal),
    )
    response.headers.update(replay_headers(replayed))
    response.headers["Location"] = f"/v1/statistics/{release_id}"
    return _view(session, release_id)


@router.get("/v1/datasets/{dataset_id}/statistics", dependencies=[ASKERS])
def list_statistics(
    dataset_id: DatasetIdPath, session: SessionDep, limit: Limit = 50, offset: Offset = 0,
) -> StatisticsPage:
    """List a dataset's statistics releases, newest first."""
    return statistics_flow.page(session=session, dataset_id=dataset_id, limit=limit,
                                offset=offset)


@router.get("/v1/statistics/{release_id}", dependencies=[ASKERS])
def get_statistics(release_id: ReleaseIdPath, session: SessionDep) -> StatisticsReleaseOut:
    """Read one statistics release: its answers, mechanism and ledger charge."""
    return _view(session, release_id)
