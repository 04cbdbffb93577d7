"""Jobs API: thin routes over app.jobs.service."""

from typing import Annotated

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import HTMLResponse, JSONResponse
from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.idempotency import IdempotencyKey, create_once, replay_headers
from app.core.ids import DatasetIdQuery, JobIdPath
from app.core.json_body import JsonRoute
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.datasets import service as dataset_service
from app.flows import training as training_flow
from app.jobs import service
from app.jobs.schemas import JobCreate, JobOut, JobPage, JobStatus
from app.reports import privacy_html as report_html
from app.reports import privacy_report as ledger_report
from app.reports.html import negotiated
from app.reports.schemas import JobPrivacyReport

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JsonRoute)
READERS = require_roles("data_scientist", "privacy_officer")
DataScientist = Annotated[Principal, require_roles("data_scientist")]


def _submit(*, session: Session, body: JobCreate, principal: Principal) -> int:
    """Reserve, queue and audit in one transaction (an idempotent replay does none)."""
    job = training_flow.submit_training(session=session, request=body)
    audit.record(
        session=session, principal=principal, action=Action.JOB_SUBMITTED, target=f"job/{job.id}",
        detail={"dataset_id": job.dataset_id, "target_epsilon": job.target_epsilon,
                "noise_multiplier": job.noise_multiplier, "epochs": job.epochs},
    )
    return job.id


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
        create=lambda: _submit(session=session, body=body, principal=principal),
    )
    response.headers.update(replay_headers(replayed))
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    return training_flow.job_view(session=session, job=service.get(session=session, job_id=job_id))


@router.get("", dependencies=[READERS])
def list_jobs(
    session: SessionDep,
    limit: Limit = 50,
    offset: Offset = 0,
    status: JobStatus | None = None,
    dataset_id: DatasetIdQuery = None,
) -> JobPage:
    """List jobs, newest first."""
    rows, total = service.list_page(
        session=session, limit=limit, offset=offset, status=status, dataset_id=dataset_id
    )
    items = [training_flow.job_view(session=session, job=j) for j in rows]
    return JobPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/{job_id}", dependencies=[READERS])
def get_job(job_id: JobIdPath, session: SessionDep) -> JobOut:
    """Read a job's status and progress."""
    return training_flow.job_view(session=session, job=service.get(session=session, job_id=job_id))


@router.post("/{job_id}/cancel", responses=problems(409))
def cancel_job(job_id: JobIdPath, session: SessionDep, principal: DataScientist) -> JobOut:
    """Cancel a job: a queued one is released, a running one stops and keeps its charge."""
    job = service.get(session=session, job_id=job_id)
    if service.cancel(session=session, job=job):  # one event per cancel that changed the job
        # "cancelled" for a queued job; "running" for one asked to stop at its epoch's end.
        audit.record(session=session, principal=principal, action=Action.JOB_CANCELLED,
                     target=f"job/{job.id}", detail={"status": job.status})
    return training_flow.job_view(session=session, job=job)


@router.get("/{job_id}/privacy-report", response_model=JobPrivacyReport,
            response_class=JSONResponse, responses=REPORT_RESPONSES,
            # Clinicians too: it is the model card of the model that scores their patients.
            dependencies=[require_roles("data_scientist", "privacy_officer", "clinician")])
def get_job_privacy_report(
    job_id: JobIdPath, session: SessionDep, html: PrefersHtml, request: Request, response: Response
) -> JobPrivacyReport | HTMLResponse:
    """The job's mechanism, accounting, model card and held-out metrics (JSON or HTML page)."""
    job = service.get(session=session, job_id=job_id)
    dataset = dataset_service.get(session=session, dataset_id=job.dataset_id)
    report = ledger_report.job_report(session=session, job=job, dataset=dataset)
    root_path = request.scope.get("root_path", "")
    return negotiated(report, html=html, response=response,
                      render=lambda r: report_html.render_job_page(r, root_path=root_path))
