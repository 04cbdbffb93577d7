"""The privacy-audit report (``GET /v1/audits/{id}/report``): the accounted epsilon beside the
audited one, the one-run audits and the membership attacks, on public data only. Each field
names its release (``Released``).
"""

from typing import Annotated, Any

from pydantic import Field

from app.core.schemas import ResponseModel
from app.jobs.models import JobStatus
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release
from app.reports.report_types import Epsilon
from app.reports.schemas import ReportError

AUDITED = Released(Release.AUDIT)
LEDGER_AUDITED = Released(Release.LEDGER, Release.AUDIT)
LEDGER_ROWS = Released(Release.LEDGER, Release.PUBLIC_BY_CONVENTION)


class AuditEpsilons(ResponseModel):
    """The accounted epsilon (an upper bound, rounded up) beside the audited one (a lower
    bound, rounded down)."""

    accounted: Annotated[Epsilon, LEDGER]
    accounted_text: Annotated[str, LEDGER]
    accountant: Annotated[str, LEDGER]
    audited: Annotated[float | None, AUDITED] = Field(description="null until the audit has run")
    audited_text: Annotated[str | None, AUDITED]
    audited_by: Annotated[str | None, AUDITED]
    delta: Annotated[float, LEDGER]
    confidence: Annotated[float, PUBLIC]
    non_private: Annotated[bool, LEDGER]


class AttackAUC(ResponseModel):
    loss: Annotated[float | None, AUDITED]
    lira: Annotated[float | None, AUDITED]


class AttackAUCs(ResponseModel):
    """ROC-AUC of each membership attack on each model (null until the audit has run)."""

    dp: AttackAUC
    non_private: AttackAUC


class AuditLinks(ResponseModel):
    audited_job_report: Annotated[str, PUBLIC]
    dataset_report: Annotated[str, PUBLIC]


class AuditReport(ResponseModel):
    """Per audited job: both epsilons, the one-run audits, the attacks, and where it ran."""

    audit_id: Annotated[int, PUBLIC]
    audited_job_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    dataset_name: Annotated[str, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    alarm: Annotated[bool, AUDITED]
    error: ReportError | None
    privacy_unit: Annotated[str, PUBLIC]
    epsilon: AuditEpsilons
    # Free-form, as stored: the request as submitted (older audits lack later fields), and
    # the audit worker's results, whose parts differ by auditor and attack; all null until
    # the audit has run. The page reads what it recognises.
    request: Annotated[dict[str, Any], PUBLIC]
    settings: Annotated[dict[str, Any] | None, LEDGER_ROWS]
    one_run: Annotated[dict[str, Any] | None, AUDITED]
    membership: Annotated[dict[str, Any] | None, AUDITED]
    attack_auc: AttackAUCs
    seconds: Annotated[dict[str, Any] | None, OPERATIONAL]
    ledger: Annotated[str, PUBLIC]
    links: AuditLinks
    statement: Annotated[str, LEDGER_AUDITED]
