"""The worker's run of a job, as the steps that cross domains: claim, load, store, commit.

A training run is six steps; the two that touch no other domain (train with DP-SGD, then
calibrate and evaluate with DP releases) live in ``worker.tasks``, which calls these in order:

1. ``claim``    take the oldest queued job (any kind) and time its wait in the queue;
2. ``load``     the dataset's train / calibration / evaluation parts and the schema's encoder;
3. train        the family's trainer (``worker.tasks.train_step``: DP-SGD by default),
                committing spend at each report;
4. evaluate     DP calibration and evaluation on the held-out parts (``worker.tasks``);
5. ``store``    the model's artifact, content-addressed, outside any transaction;
6. ``commit``   finish the job (which settles its ledger entry) and register its model, in one
                transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from app.bands import model_thresholds
from app.datasets import parts as dataset_parts
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from app.datasets.schema.encoding import Encoder, encoder_for
from app.jobs import queue
from app.jobs.models import SUCCEEDED, Job
from app.ledger import service as ledger_service
from app.ledger import spaces
from app.ledger.release import Scope
from app.observability import job_metrics
from app.privacy.accounting import finite_or_none
from app.registry import artifacts
from app.registry import service as registry_service
from app.registry.models import TrainedModel

if TYPE_CHECKING:
    from torch import nn


def claim(*, session: Session, worker_id: str, lease_seconds: float) -> Job | None:
    """Take the oldest queued job for this worker (``queue.claim``) and record how long it
    waited; None when the queue is empty."""
    job = queue.claim(session=session, worker_id=worker_id, lease_seconds=lease_seconds)
    if job is not None:
        job_metrics.observe_claim(created_at=job.created_at, started_at=job.started_at)
    return job


@dataclass(frozen=True)
class LoadedData:
    """What a training run reads from its dataset, loaded in one short transaction."""

    split: dataset_parts.Split  # the train / calibration / evaluation parts (keyed coins)
    encoder: Encoder  # from the dataset's declared schema (public bounds only)
    ledger_deltas: tuple[float, ...]
    """The deltas the ledger reads this dataset's releases at: its budget's (its own filter)
    and its patient space's (the organisation's per-patient delta, or a generator seed's: the
    per-patient filter's). The held-out releases' noise is matched at each
    (``app.privacy.parallel.held_out_noise``); empty for a public dataset."""

    def held_out_deltas(self, job_delta: float) -> list[float]:
        """Every delta a held-out release must be no costlier than the training at."""
        return sorted({job_delta, *self.ledger_deltas})


def load(*, session: Session, dataset_id: int, job_id: int | None = None) -> LoadedData:
    """The dataset's parts and the encoder of its declared schema; for job ``job_id``,
    without the patients its release leaves out (its ledger entry says whom).

    Raises:
        DatasetNotFound: the dataset is gone (the job fails).
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    left = (None if job_id is None
            else ledger_service.left_out_of(session=session, scope=Scope.job(job_id)))
    return LoadedData(split=dataset_parts.load_parts(dataset, left),
                      encoder=encoder_for(dataset_parts.schema_of(dataset)),
                      ledger_deltas=ledger_deltas(session=session, dataset=dataset))


def ledger_deltas(*, session: Session, dataset: Dataset) -> tuple[float, ...]:
    """``LoadedData.ledger_deltas`` of ``dataset``, as its filters read them now."""
    space = (None if dataset.patient_space_id is None
             else session.get(spaces.PatientSpace, dataset.patient_space_id))
    found = (dataset.budget_delta, None if space is None else space.budget_delta)
    return tuple(sorted({float(d) for d in found if d is not None}))


@dataclass(frozen=True)
class TrainedNetwork:
    """A finished run, calibrated and evaluated: what ``store`` and ``commit`` keep."""

    network: nn.Module
    kind: str  # a registered family's name (app.families)
    hidden_units: int
    calibration_method: str
    metrics: dict[str, Any]  # held-out metrics (DP releases), the calibration record included
    epsilon: float  # the headline PLD accountant (key prv); inf when non-private
    epsilon_rdp: float  # RDP accountant; inf when non-private
    delta: float
    schema: DatasetSchema  # the declaration the network's inputs were encoded from
    # Which accountant ``epsilon`` is: the PLD headline (key prv), or "rdp" where PLD has no
    # figure (a hyper-parameter search: repeat-and-select, ``app.privacy.selection``).
    accountant: str = "prv"
    # The family's part of the artifact config, where its trainer fitted the module's shape
    # (``worker.trainers.FittedModel``); None: ``Family.artifact_config(hidden_units=...)``.
    artifact_config: dict[str, Any] | None = None


def store(*, trained: TrainedNetwork) -> str:
    """Save the network's artifact (content-addressed); returns its SHA-256.

    Written before ``commit``: a crash in between leaves only an unreferenced file, which the
    start-up sweep removes (``app.flows.sweep``).
    """
    return artifacts.save(
        trained.network,
        artifacts.artifact_config(kind=trained.kind, hidden_units=trained.hidden_units,
                                  calibration=trained.calibration_method, schema=trained.schema,
                                  family_config=trained.artifact_config),
    )


def commit(
    *, session: Session, job_id: int, dataset_id: int, worker_id: str, trained: TrainedNetwork,
    artifact_sha256: str,
) -> TrainedModel | None:
    """Finish the job (which commits its spend to the ledger), register the model with its
    schema's band thresholds (``app.bands.model_thresholds``: the outcome's declared bands, the
    ones its DP evaluation binned at), and activate it if no model is active, in one transaction.

    The first model of a fresh service scores at once (the zero-set-up flow); every later one
    waits for an explicit activation.

    Returns:
        The registered model, or None when the job is no longer this worker's (its lease was
        lost): then nothing but the content-addressed artifact was written.
    """
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
        artifact_sha256=artifact_sha256,
        feature_names=trained.schema.feature_names,
        schema_json=trained.schema.model_dump(mode="json"),
        schema_hash=schema_hash(trained.schema),
        epsilon=finite_or_none(trained.epsilon),
        epsilon_rdp=finite_or_none(trained.epsilon_rdp),
        delta=trained.delta,
        accountant=trained.accountant,
        metrics=trained.metrics,
        band_thresholds=model_thresholds(trained.schema.outcome.bands),
    )
    session.add(model)
    registry_service.activate_if_none(session=session, model=model)
    return model
