"""Retraining from a monitoring run and champion/challenger comparisons: thin routes over
app.flows.comparisons.

A comparison is a job of kind ``comparison`` on the shared queue; cancel it like any job
(``POST /v1/jobs/{id}/cancel``). Activating a challenger stays a person's decision
(``POST /v1/models/{id}/activate``).
"""

from typing import Annotated

from fastapi import APIRouter, Response, status

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import ComparisonIdPath, ModelIdPath, RunIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.flows import comparisons as comparison_flow
from app.jobs.schemas import JobOut
from app.monitoring.comparison_schemas import ComparisonCreate, ComparisonOut, RetrainCreate

router = APIRouter(tags=["monitoring"], route_class=JsonRoute)
READERS = require_roles("data_scientist", "privacy_officer")
DataScientist = Annotated[Principal, require_roles("data_scientist")]


@router.post("/v1/monitoring-runs/{run_id}/retrain", status_code=status.HTTP_202_ACCEPTED,
             responses=problems(404, 409))
def retrain_from_run(run_id: RunIdPath, session: SessionDep, response: Response,
                     principal: DataScientist, body: RetrainCreate | None = None) -> JobOut:
    """Queue a training job on the run's follow-up with the run's model's recipe (its size-
    dependent parts planned again for the follow-up); reserved like any job."""
    job = comparison_flow.retrain(session=session, run_id=run_id,
                                  request=body or RetrainCreate(), principal=principal)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return job


@router.post("/v1/models/{model_id}/comparisons", status_code=status.HTTP_202_ACCEPTED,
             responses=problems(404, 409))
def create_comparison(model_id: ModelIdPath, body: ComparisonCreate, session: SessionDep,
                      response: Response, principal: DataScientist) -> ComparisonOut:
    """Queue a comparison of this model (the champion) with a challenger on a follow-up's
    evaluation part: one DP release charged to the follow-up."""
    found = comparison_flow.submit(session=session, champion_id=model_id, request=body,
                                   principal=principal)
    response.headers["Location"] = f"/v1/comparisons/{found.id}"
    return found


@router.get("/v1/comparisons/{comparison_id}", dependencies=[READERS])
def get_comparison(comparison_id: ComparisonIdPath, session: SessionDep) -> ComparisonOut:
    """A comparison's status and, once done, both evaluations, their difference and the
    verdict."""
    return comparison_flow.view(session=session, comparison_id=comparison_id)
