"""Request and response bodies of the privacy-audit API."""

from typing import Annotated, Any

from pydantic import Field

from app.core.ids import MAX_ID
from app.core.schemas import Page, RequestModel, ResponseModel, UtcDatetime, register_ranges
from app.jobs.models import JobStatus
from app.jobs.schemas import ErrorOut
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release

AUDITED = Released(Release.AUDIT)


@register_ranges
class AuditCreate(RequestModel):
    """Audit the mechanism of training job ``job_id``, with its exact settings."""

    job_id: int = Field(ge=1, le=MAX_ID, description="the training job whose settings are audited")
    canaries: int = Field(
        default=1000, ge=10, le=100_000,
        description="m: canaries of each one-run audit, each included with probability 1/2; "
        "more canaries allow a larger audited epsilon",
    )
    shadow_models: int = Field(
        default=8, ge=2, le=64,
        description="shadow models per attacked model (LiRA); each pool record is in half",
    )
    seed: int = Field(
        default=0, ge=0, le=2**31 - 1,
        description="the auditor's choices (canaries, coin flips, fresh rows); the training "
        "noise stays secret and fresh",
    )
    confidence: float = Field(
        default=0.95, ge=0.5, le=0.999, description="of the audited lower bound",
    )


class AuditOut(ResponseModel):
    """An audit's status and headline numbers (the report has the rest); built from its job
    row by ``privacy_audit.service.describe``."""

    id: Annotated[int, PUBLIC]  # the audit's own job on the shared queue
    audited_job_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    request: Annotated[dict[str, Any], PUBLIC]
    accounted_epsilon: Annotated[float | None, LEDGER]
    audited_epsilon: Annotated[float | None, AUDITED]
    alarm: Annotated[bool, AUDITED]
    error: ErrorOut | None
    report: Annotated[str, PUBLIC]
    created_at: Annotated[UtcDatetime, PUBLIC]
    started_at: Annotated[UtcDatetime | None, OPERATIONAL]
    finished_at: Annotated[UtcDatetime | None, OPERATIONAL]


class AuditPage(Page[AuditOut]):
    pass
