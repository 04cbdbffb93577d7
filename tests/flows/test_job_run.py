"""The worker's flow steps one by one (claim, load, commit), on SQLite; the whole run, with
train and evaluate between them, is ``tests/worker`` and ``tests/jobs/test_queue.py``."""

import math

from sqlalchemy import func, select
from torch import nn

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import job_run
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import spaces
from app.registry.models import TrainedModel
from tests.conftest import FAST_TRAINING, small_dataset


def _submit(db: Database) -> tuple[int, int]:
    with db.session_scope() as session:
        dataset = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset()))
        job = training_flow.submit_training(session=session, request=JobCreate.model_validate(
            {"dataset_id": dataset.id, "privacy": {"noise_multiplier": 2.0},
             "training": FAST_TRAINING}))
        return dataset.id, job.id


def test_claim_takes_the_queued_job_once(db: Database) -> None:
    with db.session_scope() as session:
        assert job_run.claim(session=session, worker_id="w", lease_seconds=60) is None
    _, job_id = _submit(db)
    with db.session_scope() as session:
        job = job_run.claim(session=session, worker_id="w", lease_seconds=60)
        assert job is not None and job.id == job_id
        assert job_run.claim(session=session, worker_id="v", lease_seconds=60) is None


def test_load_reads_the_parts_and_the_deltas_the_ledger_reads(db: Database) -> None:
    """The held-out releases are matched at the budget's delta and at the patient space's
    (the per-patient filter's): read from the space, so a space whose delta differs from the
    dataset's is matched at its own."""
    dataset_id, _ = _submit(db)
    with db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        assert dataset.patient_space_id is not None and dataset.budget_delta is not None
        space = session.get(spaces.PatientSpace, dataset.patient_space_id)
        assert space is not None
        space.budget_delta = dataset.budget_delta / 100
    with db.session_scope() as session:
        loaded = job_run.load(session=session, dataset_id=dataset_id)
        split = loaded.split
        parts = (len(split.train.y), len(split.calibration.y), len(split.evaluation.y))
        assert sum(parts) == dataset.n_rows and all(parts)
        assert loaded.ledger_deltas == (dataset.budget_delta / 100, dataset.budget_delta)
        assert loaded.held_out_deltas(0.5) == [dataset.budget_delta / 100,
                                               dataset.budget_delta, 0.5]


def test_commit_writes_nothing_for_a_job_this_worker_lost(db: Database) -> None:
    dataset_id, job_id = _submit(db)
    with db.session_scope() as session:
        job_run.claim(session=session, worker_id="w", lease_seconds=60)
        loaded = job_run.load(session=session, dataset_id=dataset_id)
    trained = job_run.TrainedNetwork(
        network=nn.Linear(1, 1), kind="logistic", hidden_units=0, calibration_method="platt",
        metrics={}, epsilon=math.inf, epsilon_rdp=math.inf, delta=1e-6,
        schema=loaded.encoder.schema)
    with db.session_scope() as session:  # another worker's commit: not its job
        model = job_run.commit(session=session, job_id=job_id, dataset_id=dataset_id,
                               worker_id="someone else", trained=trained, artifact_sha256="0" * 64)
        assert model is None
        assert session.scalar(select(func.count()).select_from(TrainedModel)) == 0
