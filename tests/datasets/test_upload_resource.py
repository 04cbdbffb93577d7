"""An upload is spooled and answered 202 with its resource; a worker ingests it. ``Prefer:
wait=N`` gives the synchronous answer when the ingest ends in time; a dataset a dead process
left ``receiving`` takes a new upload (and a delete) again after a restart."""

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.database import Database
from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import claims
from app.datasets.models import AWAITING_DATA, RECEIVING, Dataset
from app.flows import upload as upload_flow
from tests.datasets.test_upload_api import _csv, _register, _rows

NO_WAIT = {"Content-Type": "text/csv", "Prefer": ""}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _poll(client: TestClient, location: str) -> dict[str, Any]:
    for _ in range(600):
        upload = client.get(location).json()
        if upload["state"] in ("succeeded", "failed"):
            return upload
        time.sleep(0.05)
    raise AssertionError(f"{location} never finished")


def test_an_upload_answers_202_and_its_resource_ends_with_the_dataset(
        client: TestClient, client_as: Callable[[str | None], TestClient]) -> None:
    dataset = _register(client)
    body = _csv(_rows(400))
    sent = client.put(f"/v1/datasets/{dataset['id']}/data", content=body, headers=NO_WAIT)
    assert sent.status_code == 202, sent.text
    assert "Preference-Applied" not in sent.headers
    location = sent.headers["Location"]
    assert location == f"/v1/uploads/{sent.json()['id']}"
    assert sent.json()["dataset_id"] == dataset["id"] and sent.json()["dataset"] is None
    done = _poll(client, location)
    assert done["state"] == "succeeded" and done["problem"] is None
    assert done["dataset"]["state"] == "ready" and done["dataset"]["rows"] == 400
    assert done["size_bytes"] == len(body)
    assert client_as("data_steward").get(location).status_code == 200
    for role in ("data_scientist", "privacy_officer", "clinician"):
        assert client_as(role).get(location).status_code == 403  # intake facts: stewards'
    assert client.get("/v1/uploads/999999").status_code == 404


def test_a_bad_table_ends_its_upload_with_the_synchronous_problem(client: TestClient) -> None:
    dataset = _register(client)
    sent = client.put(f"/v1/datasets/{dataset['id']}/data",
                      content=b"patient_id,phq9\np1,3\n", headers=NO_WAIT)
    assert sent.status_code == 202
    done = _poll(client, sent.headers["Location"])
    assert done["state"] == "failed" and done["dataset"] is None
    assert done["problem"]["status"] == 422
    assert done["problem"]["type"].endswith("/invalid-table")
    assert client.get(f"/v1/datasets/{dataset['id']}").json()["state"] == AWAITING_DATA
    waited = client.put(f"/v1/datasets/{dataset['id']}/data", content=b"patient_id,phq9\np1,3\n",
                        headers={"Content-Type": "text/csv", "Prefer": "wait=30"})
    assert waited.status_code == 422 and waited.headers["Preference-Applied"] == "wait=30"
    assert {k: v for k, v in waited.json().items() if k != "instance"} == {
        k: v for k, v in done["problem"].items() if k != "instance"}


def test_a_wait_that_runs_out_answers_202(client: TestClient,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = _register(client)
    real = upload_flow.ingest

    def slow(**kwargs: Any) -> Any:
        time.sleep(2)
        return real(**kwargs)

    monkeypatch.setattr(upload_flow, "ingest", slow)
    sent = client.put(f"/v1/datasets/{dataset['id']}/data", content=_csv(_rows(300)),
                      headers={"Content-Type": "text/csv", "Prefer": "wait=1"})
    assert sent.status_code == 202 and sent.headers["Preference-Applied"] == "wait=1"
    assert sent.json()["state"] in ("queued", "ingesting")
    assert _poll(client, sent.headers["Location"])["state"] == "succeeded"


def test_a_dead_upload_claim_is_given_back_at_start_up(db: Database, client: TestClient,
                                                       _data_dir: Path) -> None:
    """A process killed while a body arrived left its dataset ``receiving`` and a spool; once
    its lease has run out, the next start gives the claim back and deletes the spool."""
    dataset_id = _register(client)["id"]
    with db.session_scope() as session:
        dead = claims.claim(session=session, dataset_id=dataset_id)
    _data_dir.mkdir(parents=True, exist_ok=True)
    spool = upload_flow.spool_path(dead.token)
    spool.write_bytes(b"patient_id,phq9\np1,")  # half a body
    refused = client.put(f"/v1/datasets/{dataset_id}/data", content=_csv(_rows(300)),
                         headers={"Content-Type": "text/csv"})
    assert refused.status_code == 409  # the claim is live: its lease runs
    upload_flow.on_startup()
    assert spool.exists()  # not yet stale: another process may still be receiving it
    with db.session_scope() as session:
        session.execute(update(Dataset).where(Dataset.id == dataset_id).values(
            upload_claimed_at=utcnow() - timedelta(seconds=settings.upload_claim_lease_seconds
                                                   + 5)))
    upload_flow.on_startup()
    assert not spool.exists()
    with db.session_scope() as session:
        assert session.get(Dataset, dataset_id).state == AWAITING_DATA  # type: ignore[union-attr]
    assert client.delete(f"/v1/datasets/{dataset_id}").status_code == 204
    other = _register(client, name="other")["id"]
    with db.session_scope() as session:
        claims.claim(session=session, dataset_id=other)
        session.execute(update(Dataset).where(Dataset.id == other).values(
            upload_claimed_at=utcnow() - timedelta(hours=2)))
    upload_flow.on_startup()
    sent = client.put(f"/v1/datasets/{other}/data", content=_csv(_rows(300, seed=3)),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200 and sent.json()["state"] == "ready", sent.text
    with db.session_scope() as session:
        assert session.get(Dataset, other).state != RECEIVING  # type: ignore[union-attr]
