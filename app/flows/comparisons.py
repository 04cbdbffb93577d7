"""Retraining from a monitoring run and champion/challenger comparisons: the steps that cross
domains (a run's model and follow-up, the training flow, the ledger, the audit log).

The routes (``app.api.comparisons``) call one of these and return.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.flows import jobs as job_flow
from app.flows import training as training_flow
from app.jobs.schemas import JobOut
from app.monitoring import comparison
from app.monitoring import service as monitoring_service
from app.monitoring.comparison_schemas import ComparisonCreate, ComparisonOut, RetrainCreate


def retrain(*, session: Session, run_id: int, request: RetrainCreate,
            principal: Principal) -> JobOut:
    """Queue a training job on the run's follow-up with its model's recipe, reserved and
    audited like any job (its audit event also names the run and the model it retrains).

    Raises:
        MonitoringRunNotFound (404); as ``app.flows.training.submit_training`` (404, 409,
            422).
    """
    run = monitoring_service.get(session=session, run_id=run_id)
    job_request = comparison.retrain_request(session=session, run=run, request=request)
    job = training_flow.submit_training(session=session, request=job_request)
    audit.record(session=session, principal=principal, action=Action.JOB_SUBMITTED,
                 target=f"job/{job.id}",
                 detail={"dataset_id": job.dataset_id, "target_epsilon": job.target_epsilon,
                         "noise_multiplier": job.noise_multiplier, "epochs": job.epochs,
                         "retrain_of_model_id": run.model_id, "monitoring_run_id": run.id})
    return job_flow.view(session=session, job_id=job.id)


def submit(*, session: Session, champion_id: int, request: ComparisonCreate,
           principal: Principal) -> ComparisonOut:
    """Queue the comparison, reserve its release and record who asked, in one transaction.

    Raises:
        as ``app.monitoring.comparison.submit`` (404, 409, 422).
    """
    job = comparison.submit(session=session, champion_id=champion_id, request=request)
    audit.record(session=session, principal=principal, action=Action.JOB_SUBMITTED,
                 target=f"job/{job.id}",
                 detail={"kind": "comparison", "champion_id": champion_id,
                         "challenger_id": request.challenger_id,
                         "dataset_id": request.dataset_id,
                         "target_epsilon": request.privacy.target_epsilon})
    return comparison.describe(job)


def view(*, session: Session, comparison_id: int) -> ComparisonOut:
    """Raises: ComparisonNotFound (404)."""
    return comparison.describe(comparison.get(session=session, comparison_id=comparison_id))
