"""Training steps that cross domains: submit a job against the ledger, complete it with its
model, and read a job's view.

Domains never call each other sideways for these; routers and the worker call the flow.
"""

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from torch import nn

from app.bands import DEFAULT_BAND_THRESHOLDS
from app.datasets import service as dataset_service
from app.datasets.dataset_schema import DatasetSchema, schema_hash
from app.jobs import queue
from app.jobs import service as job_service
from app.jobs.models import SUCCEEDED, Job
from app.jobs.schemas import JobCreate, JobOut
from app.ledger import service as ledger_service
from app.privacy.accounting import finite_or_none
from app.registry import artifacts
from app.registry import service as registry_service
from app.registry.models import TrainedModel


def submit_training(*, session: Session, request: JobCreate) -> Job:
    """Plan the job's mechanism, then queue it and reserve its spend in one transaction.

    The ledger takes the dataset's lock before it admits, so the check and the insert are
    atomic with respect to other submissions; the NOTIFY is delivered only if this commits.

    Raises:
        DatasetNotFound, InvalidRequest, BudgetExceeded.
    """
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    job_service.check_trainable(dataset)
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


def job_view(*, session: Session, job: Job) -> JobOut:
    """The job as the API shows it, with the id of the model it produced (if any)."""
    return JobOut.from_orm_row(
        job,
        model_id=registry_service.model_id_for_job(session=session, job_id=job.id),
        epsilon_planned=job_service.planned_epsilon(job),
    )


@dataclass(frozen=True)
class TrainedNetwork:
    """A finished run, calibrated and evaluated: what ``complete_training`` stores."""

    network: nn.Module
    kind: str  # a registered family's name (app.families)
    hidden_units: int
    calibration_method: str
    metrics: dict[str, Any]  # held-out metrics (DP releases), the calibration record included
    epsilon: float  # the headline PLD accountant (key prv); inf when non-private
    epsilon_rdp: float  # RDP accountant; inf when non-private
    delta: float
    schema: DatasetSchema  # the declaration the network's inputs were encoded from


def complete_training(
    *, session: Session, job_id: int, dataset_id: int, worker_id: str, trained: TrainedNetwork
) -> TrainedModel | None:
    """Store the artifact, finish the job (which settles its ledger entry), register the model
    with the default band thresholds, and activate it if no model is active.

    The first model of a fresh service scores at once (the zero-set-up flow); every later one
    waits for an explicit activation.

    Returns:
        The registered model, or None when the job is no longer this worker's (its lease was
        lost): then nothing but the content-addressed artifact was written.
    """
    sha = artifacts.save(
        trained.network,
        artifacts.artifact_config(kind=trained.kind, hidden_units=trained.hidden_units,
                                  calibration=trained.calibration_method, schema=trained.schema),
    )
    job = queue.finish(
        session=session, job_id=job_id, worker_id=worker_id, status=SUCCEEDED,
        metrics=trained.metrics,
    )
    if job is None:
        return None
    model = TrainedModel(
        job_id=job_id,
        dataset_id=dataset_id,
        kind=trained.kind,
        artifact_sha256=sha,
        feature_names=trained.schema.feature_names,
        schema_json=trained.schema.model_dump(mode="json"),
        schema_hash=schema_hash(trained.schema),
        epsilon=finite_or_none(trained.epsilon),
        epsilon_rdp=finite_or_none(trained.epsilon_rdp),
        delta=trained.delta,
        accountant="prv",
        metrics=trained.metrics,
        band_thresholds=dict(DEFAULT_BAND_THRESHOLDS),
    )
    session.add(model)
    registry_service.activate_if_none(session=session, model=model)
    return model
