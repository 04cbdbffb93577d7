"""A federation's steps that cross domains: declare one (an admin's decision), join it with one
of this clinic's datasets (a data steward's: plan the site's job, queue it and reserve its whole
plan on the dataset's ledger in one transaction), and read one."""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.federation import plan
from app.federation import service as federation_service
from app.federation.schemas import FederationCreate, FederationJoin, FederationOut
from app.flows.training import job_view
from app.jobs import service as job_service
from app.jobs.schemas import JobOut
from app.ledger import service as ledger_service
from app.ledger.release import Scope


def declare(*, session: Session, request: FederationCreate,
            principal: Principal) -> FederationOut:
    federation = federation_service.create(session=session, request=request)
    audit.record(session=session, principal=principal, action=Action.FEDERATION_DECLARED,
                 target=f"federation/{federation.id}",
                 detail={"name": request.name, "role": request.role,
                         "sites": [site.name for site in request.sites]})
    return FederationOut.model_validate(federation)


def join(*, session: Session, federation_id: int, request: FederationJoin,
         principal: Principal) -> JobOut:
    """Queue this clinic's part and reserve all of it, or refuse (409 with the largest target
    that fits, as a single-site job) before anything is stored.

    Raises:
        FederationNotFound, DatasetNotFound (404); NotThisFederation, AlreadyJoined,
        BudgetExceeded, DatasetNotTrainable (409); InvalidRequest, DatasetTooSmall (422).
    """
    federation = federation_service.get(session=session, federation_id=federation_id, lock=True)
    federation_service.check_not_joined(session=session, federation_id=federation_id)
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    job = plan.site_job(federation=federation, dataset=dataset)
    job_service.enqueue(session=session, job=job)
    ledger_service.reserve(session=session, dataset=dataset, scope=Scope.job(job.id),
                           event=job_service.training_event(job),
                           clip_norm=job.dp_sgd_plan.max_grad_norm,
                           delta=job.delta)
    audit.record(session=session, principal=principal, action=Action.FEDERATION_JOINED,
                 target=f"job/{job.id}",
                 detail={"federation_id": federation_id, "dataset_id": dataset.id,
                         "target_epsilon": job.target_epsilon})
    return job_view(session=session, job=job)


def view(*, session: Session, federation_id: int) -> FederationOut:
    """Raises: FederationNotFound (404)."""
    return FederationOut.model_validate(
        federation_service.get(session=session, federation_id=federation_id))
