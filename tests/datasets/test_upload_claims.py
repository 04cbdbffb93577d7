"""One upload per dataset: concurrent uploads to one dataset let exactly one through, and the
others are refused at once with nothing kept (SQLite, PostgreSQL).

Before the claim, six concurrent ``PUT .../data`` all answered 200: the dataset pointed to the
last writer, five unreferenced patient tables stayed on disk (surviving ``DELETE .../data``),
and six audit events claimed six different tables.
"""

import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.auth.audit import Action
from app.auth.models import AuditEvent
from app.core.database import Database, get_database
from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import claims, uploads
from app.datasets.claims import DatasetNotAwaitingData, UploadInProgress
from app.datasets.intake import table_store
from app.datasets.models import AWAITING_DATA, READY, RECEIVING, Dataset
from tests.datasets.test_upload_api import _csv, _put, _register, _rows

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _tables(data_dir: Path) -> list[Path]:
    """Kept tables: files, not the spools (dot-named) nor the patient index's folder."""
    return [p for p in data_dir.iterdir() if not p.name.startswith(".") and p.is_file()]


def test_six_parallel_uploads_to_one_dataset_let_exactly_one_through(
    any_client: TestClient, _data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = _register(any_client, privacy_budget={"epsilon": 3, "delta": 1e-6})
    bodies = [_csv(_rows(50_000, seed=seed)) for seed in range(6)]
    answers: list[int] = []
    lock, start = threading.Lock(), threading.Barrier(len(bodies))

    def upload(body: bytes) -> None:
        start.wait()
        answer = _put(any_client, dataset["id"], body)
        with lock:
            answers.append(answer.status_code)

    threads = [threading.Thread(target=upload, args=(body,)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 409, 409, 409, 409, 409], answers
    ready = any_client.get(f"/v1/datasets/{dataset['id']}").json()
    assert ready["state"] == "ready"
    assert len(_tables(_data_dir)) == 1  # only the winner's table was kept
    with get_database().session_scope() as session:
        uploaded = session.scalars(select(AuditEvent).where(
            AuditEvent.action == Action.DATA_UPLOADED,
            AuditEvent.target == f"dataset/{dataset['id']}")).all()
        assert len(uploaded) == 1
        row = session.get(Dataset, dataset["id"])
        assert row is not None and row.upload_claim is None
        assert _tables(_data_dir)[0].name.startswith(row.table_sha256 or "-")
    assert any_client.delete(f"/v1/datasets/{dataset['id']}/data").status_code == 200
    assert _tables(_data_dir) == []  # erasing leaves no patient table behind


def test_a_failed_upload_gives_its_claim_back(client: TestClient) -> None:
    dataset = _register(client)
    bad = _put(client, dataset["id"], b"patient_id,phq9\np1,3\n")
    assert bad.status_code == 422
    assert client.get(f"/v1/datasets/{dataset['id']}").json()["state"] == AWAITING_DATA
    assert _put(client, dataset["id"], _csv(_rows(500))).status_code == 200


def test_a_claim_admits_one_upload_and_a_stale_one_can_be_taken_over(db: Database,
                                                                      client: TestClient,
                                                                      ) -> None:
    dataset_id = _register(client)["id"]
    with db.session_scope() as session:
        first = claims.claim(session=session, dataset_id=dataset_id)
    with db.session_scope() as session, pytest.raises(UploadInProgress):
        claims.claim(session=session, dataset_id=dataset_id)
    with db.session_scope() as session:  # its process died long ago
        session.execute(update(Dataset).where(Dataset.id == dataset_id).values(
            upload_claimed_at=utcnow()
            - timedelta(seconds=settings.upload_claim_lease_seconds + 5)))
    with db.session_scope() as session:
        second = claims.claim(session=session, dataset_id=dataset_id)
    assert second.token != first.token
    received = uploads.receive(claimed=first, path=_write(db, _csv(_rows(300))),
                               media_type="text/csv")
    with db.session_scope() as session, pytest.raises(UploadInProgress):
        uploads.accept(session=session, received=received)  # the stale owner woke up
    with db.session_scope() as session:
        claims.give_back(session=session, claimed=first)  # not its claim any more: no-op
        assert session.get(Dataset, dataset_id).state == RECEIVING  # type: ignore[union-attr]
    received = uploads.receive(claimed=second, path=_write(db, _csv(_rows(300, seed=4))),
                               media_type="text/csv")
    with db.session_scope() as session:
        assert uploads.accept(session=session, received=received).state == READY
    with db.session_scope() as session, pytest.raises(DatasetNotAwaitingData):
        claims.claim(session=session, dataset_id=dataset_id)


def _write(db: Database, body: bytes) -> Path:
    path = Path(db.url.split("///", 1)[1]).parent / f"body-{len(body)}-{hash(body)}.csv"
    path.write_bytes(body)
    return path


def test_a_registration_that_never_received_rows_can_be_deleted(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """A failed first upload leaves a registered, empty dataset: its steward may delete it;
    once rows arrived, only erasing them is possible (the ledger and reports stay)."""
    empty = _register(client)
    assert _put(client, empty["id"], b"patient_id,phq9\np1,3\n").status_code == 422
    assert client_as("data_scientist").delete(f"/v1/datasets/{empty['id']}").status_code == 403
    assert client_as("data_steward").delete(f"/v1/datasets/{empty['id']}").status_code == 204
    assert client.get(f"/v1/datasets/{empty['id']}").status_code == 404
    assert empty["id"] not in [d["id"] for d in client.get("/v1/datasets").json()["items"]]
    assert _put(client, empty["id"], _csv(_rows(300))).status_code == 404
    assert client.delete(f"/v1/datasets/{empty['id']}").status_code == 404
    ready = _register(client)
    assert _put(client, ready["id"], _csv(_rows(300, seed=9))).status_code == 200
    refused = client.delete(f"/v1/datasets/{ready['id']}")
    assert refused.status_code == 409 and refused.json()["state"] == "ready"
    with get_database().session_scope() as session:
        withdrawn = session.scalars(select(AuditEvent).where(
            AuditEvent.action == Action.DATASET_WITHDRAWN)).all()
        assert [e.target for e in withdrawn] == [f"dataset/{empty['id']}"]


def test_a_table_that_cannot_be_kept_fails_the_accept_and_registers_nothing(
        db: Database, client: TestClient, _data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is kept on a thread while the accept goes on; its commit waits for it, so a
    table that could not be kept (a full disk) leaves the dataset as it was."""
    dataset_id = _register(client)["id"]
    with db.session_scope() as session:
        claimed = claims.claim(session=session, dataset_id=dataset_id)
    received = uploads.receive(claimed=claimed, path=_write(db, _csv(_rows(300))),
                               media_type="text/csv")

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(table_store, "keep_as_sent", disk_full)
    with pytest.raises(OSError, match="No space left"), db.session_scope() as session:
        assert uploads.accept(session=session, received=received).state == READY
    with db.session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        assert (dataset.state, dataset.table_sha256, dataset.n_rows) == (RECEIVING, None, 0)
    assert not _data_dir.exists() or _tables(_data_dir) == []


def test_a_start_gives_back_at_once_only_the_claims_of_gone_processes(
        db: Database, client: TestClient) -> None:
    """Within their lease: a gone process's claim (another pid, or this pid's earlier start)
    is given back; a live process's, another host's or one naming no owner is kept."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    host, pid, boot = claims.this_process().rsplit(" ", 2)
    owners = {f"{host} {ended.pid} {boot}": AWAITING_DATA,
              f"{host} {pid} earlier-start": AWAITING_DATA,
              f"{host} {live.pid} {boot}": RECEIVING,
              claims.this_process(): RECEIVING,
              f"other-{host} {ended.pid} {boot}": RECEIVING,
              None: RECEIVING}
    ids = {}
    try:
        for owner in owners:
            dataset_id = ids[owner] = _register(client)["id"]
            with db.session_scope() as session:
                claims.claim(session=session, dataset_id=dataset_id)
                session.execute(update(Dataset).where(Dataset.id == dataset_id)
                                .values(upload_claim_owner=owner))
        with db.session_scope() as session:
            given_back = claims.give_back_stale(session=session)
        with db.session_scope() as session:
            states = {owner: session.get(Dataset, ids[owner]).state  # type: ignore[union-attr]
                      for owner in owners}
    finally:
        live.kill()
        live.wait()
    assert states == owners
    assert len(given_back) == 2
