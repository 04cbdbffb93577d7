"""Training steps that cross domains: submit a job against the ledger, and read a job's view.

Domains never call each other sideways for these; routers and the worker call the flow.
"""

from typing import Any

from sqlalchemy.orm import Session

from app.datasets import service as dataset_service
from app.jobs import service as job_service
from app.jobs.models import Job
from app.jobs.schemas import JobCreate
from app.ledger import service as ledger_service
from app.registry import service as registry_service


def submit_training(*, session: Session, request: JobCreate) -> Job:
    """Plan the job's mechanism, then queue it and reserve its spend in one transaction.

    The ledger takes the dataset's lock before it admits, so the check and the insert are
    atomic with respect to other submissions; the NOTIFY is delivered only if this commits.

    Raises:
        DatasetNotFound, InvalidRequest, BudgetExceeded.
    """
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    job = job_service.plan(dataset=dataset, request=request)
    job_service.enqueue(session=session, job=job)
    ledger_service.reserve(
        session=session,
        dataset=dataset,
        job_id=job.id,
        mechanism=job_service.mechanism_of(job),
        clip_norm=job.max_grad_norm,
        delta=job.delta,
    )
    return job


def job_view(*, session: Session, job: Job) -> dict[str, Any]:
    """The job as the API shows it, with the id of the model it produced (if any)."""
    model_id = registry_service.model_id_for_job(session=session, job_id=job.id)
    return job_service.to_out(job=job, model_id=model_id)
