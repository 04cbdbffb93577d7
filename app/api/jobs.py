"""Jobs API: thin routes over app.jobs.service and app.flows.jobs."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import HTMLResponse, JSONResponse

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.idempotency import IdempotencyKey, create_once, replay_headers
from app.core.ids import DatasetIdQuery, JobIdPath
from app.core.json_body import JsonRoute
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.flows import jobs as job_flow
from app.jobs.schemas import JobCreate, JobOut, JobPage, JobStatus, JobStatusOut
from app.reports import privacy_html as report_html
from app.reports.html import negotiated
from app.reports.schemas import JobPrivacyReport

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonRoute)
READERS = require_roles("data_scientist", "privacy_officer")
DataScientist = Annotated[Principal, require_roles("data_scientist")]


@router.post("", status_code=status.HTTP_202_ACCEPTED, responses=problems(404, 409))
def create_job(
    body: JobCreate, session: SessionDep, response: Response, principal: DataScientist,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    """Submit a DP-SGD training job; its budget is reserved atomically or refused (409).

    With ``Idempotency-Key``, a retry returns the first attempt's job and reserves nothing.
    """
    job_id, replayed = create_once(
        session=session, owner=principal.key_id, route="POST /v1/jobs", key=idempotency_key,
        body=body,
        create=lambda: job_flow.submit(session=session, request=body, principal=principal),
    )
    response.headers.update(replay_headers(replayed))
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    return job_flow.view(session=session, job_id=job_id)


@router.get("", dependencies=[READERS])
def list_jobs(
    session: SessionDep,
    limit: Limit = 50,
    offset: Offset = 0,
    status: JobStatus | None = None,
    dataset_id: DatasetIdQuery = None,
) -> JobPage:
    """List jobs, newest first."""
    return job_flow.page(session=session, limit=limit, offset=offset, status=status,
                         dataset_id=dataset_id)


JobView = Annotated[Literal["full", "status"], Query(
    description="full (the default): the job with its plan, training request and results; "
    "status: a small status poll (state, progress, model id, error) linking the full job")]


@router.get("/{job_id}", dependencies=[READERS])
def get_job(job_id: JobIdPath, session: SessionDep,
            view: JobView = "full") -> JobOut | JobStatusOut:
    """Read a job: in full, or with ``view=status`` only what a poll needs."""
    if view == "status":
        return job_flow.status_view(session=session, job_id=job_id)
    return job_flow.view(session=session, job_id=job_id)


@router.post("/{job_id}/cancel", responses=problems(409))
def cancel_job(job_id: JobIdPath, session: SessionDep, principal: DataScientist) -> JobOut:
    """Cancel a job: a queued one is released, a running one stops and keeps its charge."""
    return job_flow.cancel(session=session, job_id=job_id, principal=principal)


@router.get("/{job_id}/privacy-report", response_model=JobPrivacyReport,
            response_class=JSONResponse, responses=REPORT_RESPONSES,
            # Clinicians too: it is the model card of the model that scores their patients.
            dependencies=[require_roles("data_scientist", "privacy_officer", "clinician")])
def get_job_privacy_report(
    job_id: JobIdPath, session: SessionDep, html: PrefersHtml, request: Request, response: Response
) -> JobPrivacyReport | HTMLResponse:
    """The job's mechanism, accounting, model card and held-out metrics (JSON or HTML page)."""
    report = job_flow.privacy_report(session=session, job_id=job_id)
    root_path = request.scope.get("root_path", "")
    return negotiated(report, html=html, response=response,
                      render=lambda r: report_html.render_job_page(r, root_path=root_path))
