"""A kind of job is its two modules, one per layer: a kind dropped into ``app.jobs.kinds`` (its
word and the model of what it stores) and its handler dropped into ``worker.kinds`` (its typed
payload and task) are queued, run by the runner, stored and served, and the OpenAPI document
lists the kind and its result; nothing else is touched."""

import copy
import importlib
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from app.core import plugins
from app.core.database import Database
from app.datasets.models import Dataset
from app.jobs import kinds
from app.jobs.kinds.base import JobKind
from app.jobs.models import SUCCEEDED, Job
from app.jobs.results import HeldOutEvaluation
from app.ledger.models import LedgerEntry
from app.monitoring import service as monitoring_service
from tests.conftest import small_dataset
from worker import handlers
from worker.runner import Worker

TOY_KIND = '''
from typing import Annotated

from app.jobs.held_out import Stored
from app.jobs.kinds.base import JobKind
from app.jobs.schemas import TaskPayload
from app.privacy.annotations import PUBLIC, Released
from app.privacy.releases import Release


class ToyRequest(TaskPayload):
    """What a toy's submission stores in the job's payload: a public number."""

    value: Annotated[float, PUBLIC]


class ToyResults(Stored):
    """A toy kind's result: its payload's public number plus one draw of Gaussian noise."""

    noisy_value: Annotated[float, Released(Release.DP_STATISTICS, note="a toy's noisy number")]


TOY = JobKind("toy", order=99, results=ToyResults, listed=True)
'''

TOY_HANDLER = '''
import numpy as np

from app.jobs.kinds.toy import TOY, ToyRequest
from app.jobs.models import SUCCEEDED, Job
from worker import tasks
from worker.handlers import ClaimedJob, JobWorker, task_handler


class ToyPayload(ToyRequest):
    """The submission's request and the noise its ledger entry reserved."""

    noise_multiplier: float


def parse_toy(job: Job) -> ToyPayload:
    request = ToyRequest.model_validate(job.payload)
    return ToyPayload(value=request.value, noise_multiplier=job.noise_multiplier)


@task_handler(TOY, parse=parse_toy)
def run_toy(worker: JobWorker, claimed: ClaimedJob[ToyPayload]) -> str:
    asked = claimed.payload
    noise = float(np.random.default_rng().normal(0.0, asked.noise_multiplier))
    tasks.finish(worker, claimed.job_id, SUCCEEDED, metrics={"noisy_value": asked.value + noise})
    return SUCCEEDED
'''


def _drop_in(monkeypatch: pytest.MonkeyPatch, folder: Path, package: ModuleType,
             text: str) -> None:
    """``text`` as module ``toy`` of ``package`` (``folder`` put on its ``__path__``)."""
    folder.mkdir()
    (folder / "toy.py").write_text(text)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    importlib.invalidate_caches()


@pytest.fixture
def toy_kind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JobKind]:
    """The toy kind dropped into both registries, found as a new module is (and undone)."""
    import worker.kinds

    handlers.handlers()  # the real handlers first
    monkeypatch.setattr(handlers, "_HANDLERS", dict(handlers._HANDLERS))
    _drop_in(monkeypatch, tmp_path / "app_kinds", kinds, TOY_KIND)
    _drop_in(monkeypatch, tmp_path / "worker_kinds", worker.kinds, TOY_HANDLER)
    found = plugins.members(kinds, JobKind)
    monkeypatch.setattr(kinds, "KINDS", {k.name: k for k in found})
    yield kinds.of("toy")
    sys.modules.pop("app.jobs.kinds.toy", None)
    sys.modules.pop("worker.kinds.toy", None)


def _queue(db: Database, client: TestClient, kind: JobKind, value: float) -> tuple[int, int]:
    """A toy job of one Gaussian release at epsilon 1 on a new dataset, reserved on its
    ledger, as a kind's submission queues it (``monitoring_service.queue_release``): the
    dataset's id and the job's."""
    dataset_id = int(client.post("/v1/datasets", json=small_dataset()).json()["id"])
    request = importlib.import_module("app.jobs.kinds.toy").ToyRequest
    with db.session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        job = monitoring_service.queue_release(session=session, dataset=dataset, kind=kind,
                                               target=1.0, payload=request(value=value))
        return dataset_id, job.id


def test_a_dropped_in_kind_is_queued_run_stored_and_served(
        toy_kind: JobKind, db: Database, client: TestClient) -> None:
    assert kinds.names()[-1] == "toy" and set(handlers.handlers()) == set(kinds.names())
    dataset_id, job_id = _queue(db, client, toy_kind, value=40.0)
    assert Worker(database=db).run_once()
    with db.session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None and (job.kind, job.status) == ("toy", SUCCEEDED)
        entry = session.scalars(select(LedgerEntry).where(LedgerEntry.job_id == job_id)).one()
        assert entry.status == "committed"  # its one release, charged in full
    served = client.get(f"/v1/jobs/{job_id}").json()
    assert served["kind"] == "toy" and served["payload"] == {"value": 40.0}
    noisy = served["metrics"]["noisy_value"]
    assert isinstance(noisy, float) and noisy != 40.0  # the noise was drawn
    listed = client.get("/v1/jobs", params={"dataset_id": dataset_id}).json()["items"]
    assert [(j["id"], j["kind"]) for j in listed] == [(job_id, "toy")]
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["JobKind"]["enum"][-1] == "toy"
    assert {"$ref": "#/components/schemas/ToyResults"} in schemas["JobOut"]["properties"][
        "metrics"]["anyOf"]
    assert schemas["ToyResults"]["properties"]["noisy_value"]["x-release"] == ["dp_statistics"]


def test_a_kind_stores_only_what_its_model_declares(toy_kind: JobKind) -> None:
    kinds.check("toy", {"noisy_value": 1.5})
    with pytest.raises(ValidationError):
        kinds.check("toy", {"noisy_value": 1.5, "exact_value": 40})  # unclassified: refused
    with pytest.raises(kinds.UnknownKind):
        kinds.check("toys", {"noisy_value": 1.5})


def test_the_builtin_kinds_in_the_order_the_api_lists_them() -> None:
    assert kinds.names() == ("train", "privacy_audit", "monitoring", "comparison", "federated")
    assert [m.__name__ for m in kinds.served_results()] == ["HeldOutEvaluation", "AuditResults"]
    assert kinds.listed() == ["train", "federated"]
    assert set(handlers.handlers()) == set(kinds.names())


@pytest.mark.parametrize("word", ["Toy", "a kind of sixteen+", "toy-kind", ""])
def test_a_kind_word_fits_the_column_and_the_api(word: str) -> None:
    with pytest.raises(ValueError, match="lower-case identifier"):
        JobKind(word, order=0, results=HeldOutEvaluation)


def test_a_kind_copies_as_itself_and_pickles_as_its_word() -> None:
    train = kinds.of("train")
    assert copy.deepcopy(train) is train and copy.copy(train) is train  # a model_copy keeps it
    word = pickle.loads(pickle.dumps(train))
    assert (type(word), word) == (str, "train")
