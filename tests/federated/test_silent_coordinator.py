"""A coordinator that accepts a clinic's connection and never speaks holds the clinic's worker
at most one round timeout, and a cancel ends a part at any stage (waiting on the coordinator,
or in the middle of a round), so the jobs queued behind it start on time."""

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from tests.conftest import small_dataset
from worker import federated_site
from worker.federated_site import SiteRun

pytestmark = pytest.mark.slow
TIMEOUT, SLACK = 2.0, 3.0  # the federation's round timeout; the watch's polls and start-up


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts every connection and never says a word; its address."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    server.close()


def _join(client: TestClient, steward: TestClient, address: str, name: str,
          timeout: float = TIMEOUT) -> tuple[int, int]:
    made = client.post("/v1/federations", json={
        "name": name, "role": "site", "address": address, "site_name": "clinic-a",
        "schema_sha256": schema_hash(BUILT_IN_SCHEMA),
        "sites": [{"name": "clinic-a"}, {"name": "clinic-b"}],
        "recipe": {"rounds": 3, "local_steps": 2, "target_epsilon": 3,
                   "round_timeout_seconds": timeout}})
    assert made.status_code == 201, made.text
    dataset_id = client.post("/v1/datasets", json=small_dataset()).json()["id"]
    joined = steward.post(f"/v1/federations/{made.json()['id']}/join",
                          json={"dataset_id": dataset_id})
    assert joined.status_code == 202, joined.text
    return dataset_id, int(joined.json()["id"])


def _ended(client: TestClient, dataset_id: int, job_id: int
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    (entry,) = [e for e in report["entries"] if e["job_id"] == job_id]
    return client.get(f"/v1/jobs/{job_id}").json(), entry


def test_a_silent_coordinator_holds_a_clinic_one_round_timeout_and_charges_nothing(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        silent: str) -> None:
    steward = client_as("data_steward")
    parts = [_join(client, steward, silent, f"net-{n}") for n in range(3)]
    job = client_as("data_scientist").post("/v1/jobs", json={
        "dataset_id": parts[0][0], "privacy": {"noise_multiplier": 1.0},
        "training": {"epochs": 1, "batch_size": 256}})
    assert job.status_code == 202, job.text
    began = time.monotonic()
    assert run_worker(limit=3) == 3  # the three parts, one after the other
    held = time.monotonic() - began
    assert held < 3 * (TIMEOUT + SLACK), held
    for dataset_id, job_id in parts:
        ended, entry = _ended(client, dataset_id, job_id)
        assert (ended["status"], ended["error"]["code"]) == ("failed", "federation_silent")
        assert entry["charged_steps"] == 0 and entry["status"] == "released", entry
    assert run_worker(limit=1) == 1  # the job queued behind them runs now
    assert client.get(f"/v1/jobs/{job.json()['id']}").json()["status"] == "succeeded"


def test_a_cancel_ends_a_part_waiting_on_a_silent_coordinator(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        silent: str) -> None:
    dataset_id, job_id = _join(client, client_as("data_steward"), silent, "net", timeout=600)
    scientist = client_as("data_scientist")

    def cancel_when_running() -> None:
        while scientist.get(f"/v1/jobs/{job_id}").json()["status"] != "running":
            time.sleep(0.05)
        time.sleep(0.5)
        assert scientist.post(f"/v1/jobs/{job_id}/cancel").status_code == 200

    canceller = threading.Thread(target=cancel_when_running, daemon=True)
    canceller.start()
    began = time.monotonic()
    run_worker(limit=1)
    assert time.monotonic() - began < SLACK + 1
    canceller.join()
    ended, entry = _ended(client, dataset_id, job_id)
    assert ended["status"] == "cancelled", ended
    assert entry["charged_steps"] == 0 and entry["status"] == "released", entry


def test_a_cancel_mid_round_ends_the_part_and_keeps_the_round_charged(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's training goes on in the abandoned client thread; the worker is free."""
    dataset_id, job_id = _join(client, client_as("data_steward"), "127.0.0.1:9", "net",
                               timeout=600)
    scientist = client_as("data_scientist")
    answered: list[bool] = []

    def a_long_round(address: str, run: SiteRun) -> None:
        with run.contact.answering():
            run.run_round(run.weights())  # charged first
            assert scientist.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
            time.sleep(2 * SLACK)  # still training when the cancel is read
        answered.append(True)  # never reached: the part ended while it answered

    monkeypatch.setattr(federated_site, "connect", a_long_round)
    began = time.monotonic()
    run_worker(limit=1)
    assert time.monotonic() - began < 2 * SLACK
    ended, entry = _ended(client, dataset_id, job_id)
    assert ended["status"] == "cancelled", ended
    assert entry["charged_steps"] == 2 and entry["remainder_released"], entry
    time.sleep(2 * SLACK)
    assert answered == []
