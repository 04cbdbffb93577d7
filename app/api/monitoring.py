"""Monitoring API: thin routes over app.flows.monitoring.

A run is a job of kind ``monitoring`` on the shared queue; cancel it like any job
(``POST /v1/jobs/{id}/cancel``).
"""

from typing import Annotated

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import HTMLResponse, JSONResponse

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import ModelIdPath, RunIdPath
from app.core.json_body import JsonRoute
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.openapi import problems
from app.flows import monitoring as monitoring_flow
from app.monitoring.schemas import MonitoringRunCreate, MonitoringRunOut, MonitoringTimeline
from app.reports import monitoring_html
from app.reports.html import negotiated

router = APIRouter(tags=["monitoring"], route_class=JsonRoute)
READERS = require_roles("data_scientist", "privacy_officer")
Monitor = Annotated[Principal, require_roles("data_scientist")]


@router.post("/v1/models/{model_id}/monitoring-runs", status_code=status.HTTP_202_ACCEPTED,
             responses=problems(404, 409))
def create_monitoring_run(
    model_id: ModelIdPath, body: MonitoringRunCreate, session: SessionDep, response: Response,
    principal: Monitor,
) -> MonitoringRunOut:
    """Queue a monitoring run of the model on a follow-up: one DP release charged to it."""
    run = monitoring_flow.submit(session=session, model_id=model_id, request=body,
                                 principal=principal)
    response.headers["Location"] = f"/v1/monitoring-runs/{run.id}"
    return run


@router.get("/v1/monitoring-runs/{run_id}", dependencies=[READERS])
def get_monitoring_run(run_id: RunIdPath, session: SessionDep) -> MonitoringRunOut:
    """A run's status and, once done, its performance, drift and feature drift."""
    return monitoring_flow.view(session=session, run_id=run_id)


@router.get("/v1/models/{model_id}/monitoring", response_model=MonitoringTimeline,
            response_class=JSONResponse, responses=REPORT_RESPONSES, dependencies=[READERS])
def get_model_monitoring(
    model_id: ModelIdPath, session: SessionDep, html: PrefersHtml, request: Request,
    response: Response,
) -> MonitoringTimeline | HTMLResponse:
    """The model's monitoring runs, oldest first (JSON, or the printable page)."""
    timeline = monitoring_flow.timeline(session=session, model_id=model_id)
    root_path = request.scope.get("root_path", "")
    return negotiated(timeline, html=html, response=response,
                      render=lambda t: monitoring_html.render_monitoring_page(
                          t, root_path=root_path))
