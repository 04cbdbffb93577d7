"""Privacy-audit rules: what may be audited, the audit job on the shared queue, its views.

An audit trains many extra models (shadows, canary runs, a non-private twin) on the audited
dataset's rows. On a protected dataset that would spend budget the ledger never charged, so
audits are refused there; on a public dataset nothing is charged and the ledger is untouched.
"""

import math

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import InvalidRequest, NotFound
from app.datasets import service as dataset_service
from app.jobs import service as job_service
from app.jobs.models import PRIVACY_AUDIT, QUEUED, TRAIN, Job
from app.jobs.schemas import ErrorOut
from app.jobs.search_schemas import SEARCH_KEY
from app.privacy import accounting
from app.privacy_audit.schemas import AuditCreate, AuditOut

PRIVACY_BUG = "privacy_bug_detected"
"""error_code of an audit whose lower bound exceeded the accounted epsilon."""
LEDGER_NOTE = (
    "Not charged to the ledger: audits run only on public datasets, whose rows carry no "
    "privacy budget; audits of datasets that are not public are refused."
)


class AuditNotFound(NotFound):
    kind, title = "audit-not-found", "Privacy audit not found"


class AuditNeedsPublicData(InvalidRequest):
    kind, title = "audit-needs-public-data", "Privacy audits run only on public datasets"


def submit(*, session: Session, request: AuditCreate) -> Job:
    """Queue an audit of ``request.job_id``'s exact mechanism (no ledger entry).

    Raises:
        JobNotFound: no such job.
        InvalidRequest: the job is itself an audit, or not DP-SGD (a fitted family's).
        AuditNeedsPublicData: the job's dataset is not public synthetic data.
    """
    target = job_service.get(session=session, job_id=request.job_id)
    if target.kind != TRAIN:
        raise InvalidRequest(
            f"job {target.id} is a privacy audit, not a training job", field="job_id"
        )
    if not target.dp_sgd:  # its white-box canaries are DP-SGD gradient steps
        raise InvalidRequest(
            f"job {target.id}'s training.model {target.training_request.get('model')!r} is not "
            "trained by DP-SGD: the white-box audit inserts gradient canaries into DP-SGD "
            "steps", field="job_id")
    dataset = dataset_service.get(session=session, dataset_id=target.dataset_id)
    if not dataset.public or dataset.source_kind != "synthetic":
        raise AuditNeedsPublicData(
            f"dataset {dataset.id} of job {target.id} is not public: an audit trains "
            f"{2 * request.shadow_models + 4} extra models on its rows, which its privacy "
            "budget does not cover; audit a job on a public (synthetic) dataset",
            field="job_id",
        )
    job = Job(
        dataset_id=dataset.id, status=QUEUED, kind=PRIVACY_AUDIT,
        target_epsilon=None, requested_noise_multiplier=target.noise_multiplier,
        noise_multiplier=target.noise_multiplier, sample_rate=target.sample_rate,
        steps=target.steps, epochs=target.epochs, delta=target.delta,
        max_grad_norm=target.max_grad_norm,
        training={k: v for k, v in target.training_request.items() if k != SEARCH_KEY},  # one run
        payload=request.model_dump(mode="json"),
        progress_epoch=0, epsilon_per_epoch=[], cancel_requested=False,
    )
    return job_service.enqueue(session=session, job=job)


def get(*, session: Session, audit_id: int) -> Job:
    job = session.get(Job, audit_id)
    if job is None or job.kind != PRIVACY_AUDIT:
        raise AuditNotFound(f"privacy audit {audit_id} does not exist", field="audit_id")
    return job


def list_page(
    *, session: Session, limit: int, offset: int, dataset_id: int | None = None
) -> tuple[list[Job], int]:
    stmt = select(Job).where(Job.kind == PRIVACY_AUDIT)
    if dataset_id is not None:
        stmt = stmt.where(Job.dataset_id == dataset_id)
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    rows = session.scalars(stmt.order_by(Job.id.desc()).limit(limit).offset(offset))
    return list(rows), total


def accounted_epsilon(
    *, noise_multiplier: float, sample_rate: float, steps: int, delta: float
) -> float:
    """The headline (PLD) accountant's epsilon for exactly the audited settings (exact
    Gaussian at q = 1; inf: non-private). The audit's alarm compares its lower bound with
    this figure."""
    mechanism = accounting.Mechanism(noise_multiplier, sample_rate, steps)
    return accounting.PRVAccountant().epsilon([mechanism], delta)


def report_href(audit_id: int, root_path: str = "") -> str:
    return f"{root_path}/v1/audits/{audit_id}/report"


def describe(*, job: Job) -> AuditOut:
    """The audit's status and headline numbers (the report has the rest)."""
    request = dict(job.payload or {})  # as submitted (AuditCreate, dumped)
    plan = job.dp_sgd_plan  # an audit trains its target's DP-SGD plan
    accounted = accounted_epsilon(noise_multiplier=plan.noise_multiplier,
                                  sample_rate=plan.sample_rate, steps=plan.steps, delta=job.delta)
    return AuditOut.from_row(
        job,
        audited_job_id=request.get("job_id"),
        request=request,
        accounted_epsilon=None if math.isinf(accounted) else accounted,
        audited_epsilon=(job.metrics or {}).get("audited_epsilon"),
        alarm=job.error_code == PRIVACY_BUG,
        error=ErrorOut.of(job),
        report=report_href(job.id),
    )


def summaries(*, session: Session, dataset_id: int) -> list[AuditOut]:
    """Every audit of the dataset, oldest first: what the dataset's privacy report links."""
    rows = session.scalars(
        select(Job).where(Job.kind == PRIVACY_AUDIT, Job.dataset_id == dataset_id)
        .order_by(Job.id)
    )
    return [describe(job=job) for job in rows]
