"""A privacy audit's steps that cross domains: queue it with its audit-log event, and build
its report with the audited dataset.

The routes (``app.api.privacy_audit``) call one of these and return.
"""

from sqlalchemy.orm import Session

from app.auth import audit as action_log
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.privacy_audit import service as audit_service
from app.privacy_audit.schemas import AuditCreate, AuditOut
from app.reports import audit_report
from app.reports.audit_schemas import AuditReport


def submit(*, session: Session, request: AuditCreate, principal: Principal) -> AuditOut:
    """Queue the audit (a job of kind ``privacy_audit``) and record who asked, in one
    transaction.

    Raises:
        as ``audit_service.submit`` (404 for an unknown job, 422 off a public dataset).
    """
    job = audit_service.submit(session=session, request=request)
    action_log.record(
        session=session, principal=principal, action=Action.JOB_SUBMITTED,
        target=f"job/{job.id}", detail={"kind": job.kind, **request.model_dump()},
    )
    return audit_service.describe(job=job)


def report(*, session: Session, audit_id: int, root_path: str = "") -> AuditReport:
    """The audit's report: accounted against audited epsilon, the one-run audits, the attacks.

    Raises:
        as ``audit_service.get`` (404 for an unknown audit).
    """
    job = audit_service.get(session=session, audit_id=audit_id)
    dataset = dataset_service.get(session=session, dataset_id=job.dataset_id)
    return audit_report.audit_report(job=job, dataset=dataset, root_path=root_path)
