"""Training steps that cross domains on the API's side: submit a job against the ledger and
read a job's view. The worker's side (claim, load, store, commit) is ``app.flows.job_run``.

Domains never call each other sideways for these; routers and the worker call the flow.
"""

from sqlalchemy.orm import Session

from app.datasets import service as dataset_service
from app.jobs import search as job_search
from app.jobs import service as job_service
from app.jobs.models import Job
from app.jobs.schemas import JobCreate, JobOut
from app.ledger import service as ledger_service
from app.ledger import statistics as ledger_statistics
from app.ledger.release import Release, Scope
from app.registry import service as registry_service


def submit_training(*, session: Session, request: JobCreate) -> Job:
    """Plan the job's mechanism, then queue it and reserve its spend in one transaction: a
    DP-SGD job's by steps, a fitted family's one release whole (``app.jobs.fitted``).

    The ledger takes the dataset's lock before it admits, so the check and the insert are
    atomic with respect to other submissions; the NOTIFY is delivered only if this commits.

    Raises:
        DatasetNotFound, InvalidRequest, BudgetExceeded.
    """
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    job_service.check_trainable(dataset)
    job = job_service.plan(dataset=dataset, request=request)
    job_service.enqueue(session=session, job=job)
    if not job.dp_sgd:  # a fitted family's one release, reserved and charged whole
        ledger_service.reserve_release(session=session, dataset=dataset, release=Release(
            scope=Scope.job(job.id), event=job_service.release_event(job), delta=job.delta,
            kind=ledger_statistics.FITTED, target_epsilon=job.target_epsilon))
        return job
    ledger_service.reserve(
        session=session,
        dataset=dataset,
        scope=Scope.job(job.id),
        event=job_service.training_event(job),
        clip_norm=job.dp_sgd_plan.max_grad_norm,
        delta=job.delta,
        tail_probability=job_search.tail_probability(job.training_request),
    )
    return job


def job_view(*, session: Session, job: Job) -> JobOut:
    """The job as the API shows it, with the id of the model it produced (if any)."""
    return JobOut.from_orm_row(
        job,
        model_id=registry_service.model_id_for_job(session=session, job_id=job.id),
        epsilon_planned=job_service.planned_epsilon(job),
        search=None if not job.dp_sgd else job_search.view(
            training=job.training_request, noise_multiplier=job.noise_multiplier,
            sample_rate=job.dp_sgd_plan.sample_rate, steps=job.dp_sgd_plan.steps,
            delta=job.delta),
    )
