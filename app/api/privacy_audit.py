"""Privacy-audit API: thin routes over app.privacy_audit.service and app.flows.audits.

An audit is a job of kind ``privacy_audit`` on the shared queue; cancel it like any job
(``POST /v1/jobs/{id}/cancel``).
"""

from typing import Annotated

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import HTMLResponse, JSONResponse

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import AuditIdPath, DatasetIdQuery
from app.core.json_body import JsonRoute
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.flows import audits as audit_flow
from app.privacy_audit import service
from app.privacy_audit.schemas import AuditCreate, AuditOut, AuditPage
from app.reports import audit_html as report_html
from app.reports.audit_schemas import AuditReport
from app.reports.html import negotiated

router = APIRouter(prefix="/v1/audits", tags=["privacy audits"], route_class=JsonRoute)
Auditor = Annotated[Principal, require_roles("data_scientist", "privacy_officer")]
READERS = require_roles("data_scientist", "privacy_officer")


@router.post("", status_code=status.HTTP_202_ACCEPTED, responses=problems(404))
def create_audit(
    body: AuditCreate, session: SessionDep, response: Response, principal: Auditor
) -> AuditOut:
    """Queue a privacy audit of a training job on a public dataset (422 otherwise)."""
    queued = audit_flow.submit(session=session, request=body, principal=principal)
    response.headers["Location"] = f"/v1/audits/{queued.id}"
    return queued


@router.get("", dependencies=[READERS])
def list_audits(
    session: SessionDep, limit: Limit = 50, offset: Offset = 0,
    dataset_id: DatasetIdQuery = None,
) -> AuditPage:
    """List privacy audits, newest first."""
    rows, total = service.list_page(
        session=session, limit=limit, offset=offset, dataset_id=dataset_id
    )
    return AuditPage(items=[service.describe(job=j) for j in rows], total=total, limit=limit,
                     offset=offset)


@router.get("/{audit_id}", dependencies=[READERS])
def get_audit(audit_id: AuditIdPath, session: SessionDep) -> AuditOut:
    """Read an audit's status and its two epsilons."""
    return service.describe(job=service.get(session=session, audit_id=audit_id))


@router.get("/{audit_id}/report", response_model=AuditReport, response_class=JSONResponse,
            responses=REPORT_RESPONSES, dependencies=[READERS])
def get_audit_report(
    audit_id: AuditIdPath, session: SessionDep, html: PrefersHtml, request: Request,
    response: Response,
) -> AuditReport | HTMLResponse:
    """Accounted against audited epsilon, the one-run audits and the attacks (JSON or HTML)."""
    body = audit_flow.report(session=session, audit_id=audit_id,
                             root_path=request.scope.get("root_path", ""))
    return negotiated(body, html=html, response=response, render=report_html.render_audit_page)
