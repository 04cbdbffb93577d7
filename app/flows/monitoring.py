"""Monitoring runs' steps that cross domains: queue a run with its audit event, serve a run,
and a model's timeline of runs.

The routes (``app.api.monitoring``) call one of these and return.
"""

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.jobs import service as job_service
from app.jobs.held_out import HeldOutBin
from app.monitoring import service as monitoring_service
from app.monitoring.models import MonitoringRun
from app.monitoring.schemas import MonitoringRunCreate, MonitoringRunOut, MonitoringTimeline
from app.monitoring.views import describe
from app.registry import service as registry_service
from app.registry.models import TrainedModel


def submit(*, session: Session, model_id: int, request: MonitoringRunCreate,
           principal: Principal) -> MonitoringRunOut:
    """Queue the run, reserve its release and record who asked, in one transaction.

    Raises:
        as ``monitoring_service.submit`` (404, 409 over budget, 422).
    """
    run = monitoring_service.submit(session=session, model_id=model_id, request=request)
    audit.record(session=session, principal=principal, action=Action.JOB_SUBMITTED,
                 target=f"job/{run.job_id}",
                 detail={"kind": "monitoring", "model_id": model_id,
                         "dataset_id": request.dataset_id,
                         "target_epsilon": request.privacy.target_epsilon,
                         "reference_release_id": run.reference_release_id})
    return _view(session, run)


def _view(session: Session, run: MonitoringRun) -> MonitoringRunOut:
    job = job_service.get(session=session, job_id=run.job_id)
    dataset = dataset_service.get(session=session, dataset_id=run.dataset_id)
    return describe(run, job, dataset)


def view(*, session: Session, run_id: int) -> MonitoringRunOut:
    """Raises: MonitoringRunNotFound (404)."""
    return _view(session, monitoring_service.get(session=session, run_id=run_id))


def timeline(*, session: Session, model_id: int) -> MonitoringTimeline:
    """The model's runs, oldest first. Raises: ModelNotFound (404)."""
    runs = monitoring_service.runs_of(session=session, model_id=model_id)
    model = registry_service.get(session=session, model_id=model_id)
    label = registry_service.schema_of(model).outcome.label or "the outcome"
    return MonitoringTimeline(model_id=model_id, outcome=label,
                              runs=[_view(session, run) for run in runs],
                              training_reliability=_training_reliability(model))


def _training_reliability(model: TrainedModel) -> list[HeldOutBin] | None:
    """The training-time evaluation's reliability bins, the baseline of each run's; None
    where the model's stored metrics have none (or not in the current shape)."""
    stored = (model.metrics or {}).get("reliability")
    if not isinstance(stored, list) or not stored:
        return None
    try:
        return [HeldOutBin.model_validate(b) for b in stored]
    except ValidationError:
        return None
