"""A training job's steps that cross domains for its routes: submit it with its audit event,
cancel it with one, read it and a page of jobs (with their models' ids) and its privacy
report.

The routes (``app.api.jobs``) call one of these and return; submitting against the ledger
itself is ``app.flows.training.submit_training``, which the benchmarks and tests call too.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.flows import training as training_flow
from app.jobs import service as job_service
from app.jobs.schemas import JobCreate, JobOut, JobPage, JobStatusOut
from app.registry import service as registry_service
from app.reports import privacy_report as reports
from app.reports.schemas import JobPrivacyReport


def submit(*, session: Session, request: JobCreate, principal: Principal) -> int:
    """Reserve, queue and audit in one transaction; returns the job's id (an idempotent
    replay, ``app.core.idempotency``, does none of it).

    Raises:
        DatasetNotFound, InvalidRequest, BudgetExceeded (``submit_training``).
    """
    job = training_flow.submit_training(session=session, request=request)
    audit.record(
        session=session, principal=principal, action=Action.JOB_SUBMITTED, target=f"job/{job.id}",
        detail={"dataset_id": job.dataset_id, "target_epsilon": job.target_epsilon,
                "noise_multiplier": job.noise_multiplier, "epochs": job.epochs},
    )
    return job.id


def page(*, session: Session, limit: int, offset: int, status: str | None,
         dataset_id: int | None) -> JobPage:
    """A page of jobs, newest first, each as the API shows it."""
    rows, total = job_service.list_page(session=session, limit=limit, offset=offset,
                                        status=status, dataset_id=dataset_id)
    items = [training_flow.job_view(session=session, job=j) for j in rows]
    return JobPage(items=items, total=total, limit=limit, offset=offset)


def view(*, session: Session, job_id: int) -> JobOut:
    """The job as the API shows it (``training_flow.job_view``).

    Raises:
        JobNotFound.
    """
    return training_flow.job_view(session=session,
                                  job=job_service.get(session=session, job_id=job_id))


def status_view(*, session: Session, job_id: int) -> JobStatusOut:
    """The job's status poll: its state and progress, the full job by link.

    Raises:
        JobNotFound.
    """
    job = job_service.get(session=session, job_id=job_id)
    return JobStatusOut.of(job, model_id=registry_service.model_id_for_job(session=session,
                                                                           job_id=job.id))


def cancel(*, session: Session, job_id: int, principal: Principal) -> JobOut:
    """Cancel the job (a queued one is released, a running one stops and keeps its charge)
    and record one audit event per cancel that changed it.

    Raises:
        JobNotFound; a conflict (409) for a job already ended (``job_service.cancel``).
    """
    job = job_service.get(session=session, job_id=job_id)
    if job_service.cancel(session=session, job=job):
        # "cancelled" for a queued job; "running" for one asked to stop at its epoch's end.
        audit.record(session=session, principal=principal, action=Action.JOB_CANCELLED,
                     target=f"job/{job.id}", detail={"status": job.status})
    return training_flow.job_view(session=session, job=job)


def privacy_report(*, session: Session, job_id: int) -> JobPrivacyReport:
    """The job's mechanism, accounting, model card and held-out metrics.

    Raises:
        JobNotFound: no such job, or it is not DP-SGD (a monitoring run's or comparison's
            one release is reported with its run, a fitted family's in its dataset's report).
    """
    job = job_service.get(session=session, job_id=job_id)
    if not job.dp_sgd:
        raise job_service.JobNotFound(
            f"job {job_id} is a {job.kind} job, not DP-SGD training: its release is reported "
            "with its run, or, for a model fitted by one release, in its dataset's privacy "
            "report", field="job_id")
    dataset = dataset_service.get(session=session, dataset_id=job.dataset_id)
    return reports.job_report(session=session, job=job, dataset=dataset)
