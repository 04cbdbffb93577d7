"""Task handlers registered by name: the runner dispatches a claimed job by its kind alone
(a kind dropped into both registries is run end to end in ``test_kind_registry.py``)."""

import pytest
from sqlalchemy import select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs import kinds
from app.jobs.models import Job
from app.jobs.schemas import JobCreate, TaskPayload
from app.ledger.models import LedgerEntry
from tests.conftest import FAST_TRAINING, small_dataset
from worker import handlers
from worker.handlers import ClaimedJob, Handler
from worker.runner import Worker


def _submit(db: Database) -> int:
    with db.session_scope() as session:
        dataset = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset()))
        request = JobCreate.model_validate(
            {"dataset_id": dataset.id, "privacy": {"noise_multiplier": 2.0},
             "training": {**FAST_TRAINING, "epochs": 2}})
        return training_flow.submit_training(session=session, request=request).id


def test_every_job_kind_has_a_handler() -> None:
    assert set(handlers.handlers()) == set(kinds.names())


def test_a_kind_takes_one_handler() -> None:
    known = handlers.handler_for("train")
    with pytest.raises(ValueError, match="already registered"):
        handlers.task_handler("train", parse=known.parse)(lambda worker, claimed: "other")


def test_the_runner_dispatches_by_the_kind_name(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _submit(db)
    seen: list[ClaimedJob[Epochs]] = []

    def parse(job: Job) -> Epochs:
        return Epochs(epochs=job.training["epochs"])

    def run(worker: object, claimed: ClaimedJob[Epochs]) -> str:
        seen.append(claimed)
        return "ran"

    handlers.handlers()  # the real handlers registered first
    monkeypatch.setitem(handlers._HANDLERS, "train", Handler("train", parse, run))
    assert Worker(database=db).run_once()
    assert [(c.job_id, c.kind, c.payload) for c in seen] == [(job_id, "train", Epochs(epochs=2))]


class Epochs(TaskPayload):
    """A toy payload: the epochs of the job's stored training request."""

    epochs: int


def test_a_kind_without_a_handler_fails_its_job_by_name(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _submit(db)
    handlers.handlers()
    monkeypatch.delitem(handlers._HANDLERS, "train")
    assert Worker(database=db).run_once()
    with db.session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.error_code) == ("failed", "unknown_job_kind")
        assert "train" in (job.error or "")
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None and entry.status != "reserved"  # settled with the job
