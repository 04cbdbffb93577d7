"""One cancel, one event: concurrent cancels of one job change it once and are audited once.

The trial: 9 concurrent ``POST /v1/jobs/{id}/cancel`` of one queued job wrote 9 ``job.cancelled``
events for its one release. The state change is a conditional UPDATE and only the call that
made it records the event (SQLite and PostgreSQL).
"""

import threading
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.database import get_database
from tests.conftest import FAST_TRAINING, small_dataset

CALLS = 9


def _submit(client: TestClient) -> int:
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    job = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                        "privacy": {"noise_multiplier": 2.0},
                                        "training": FAST_TRAINING})
    assert job.status_code == 202, job.text
    return int(job.json()["id"])


def _cancel_at_once(client: TestClient, job_id: int) -> list[Any]:
    start = threading.Barrier(CALLS)
    answers: list[Any] = []
    lock = threading.Lock()

    def cancel() -> None:
        start.wait()
        response = client.post(f"/v1/jobs/{job_id}/cancel")
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=cancel) for _ in range(CALLS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


def _events(client: TestClient, job_id: int) -> list[dict[str, Any]]:
    page = client.get("/v1/audit-log", params={"action": "job.cancelled", "limit": 100}).json()
    return [e for e in page["items"] if e["target"] == f"job/{job_id}"]


def test_concurrent_cancels_of_a_queued_job_record_one_event(any_client: TestClient) -> None:
    job_id = _submit(any_client)
    answers = _cancel_at_once(any_client, job_id)
    # One call cancelled it; the others found it finished, as a later cancel would.
    assert sorted(r.status_code for r in answers) == [200] + [409] * (CALLS - 1), [
        r.text for r in answers]
    assert [e["detail"] for e in _events(any_client, job_id)] == [{"status": "cancelled"}]
    with get_database().engine.connect() as conn:
        released = conn.execute(text(
            "SELECT count(*) FROM ledger_event e JOIN ledger_entry n ON e.entry_id = n.id "
            "WHERE n.job_id = :id AND e.kind = 'release'"
        ), {"id": job_id}).scalar_one()
    assert released == 1


def test_concurrent_stop_requests_of_a_running_job_record_one_event(
    any_client: TestClient,
) -> None:
    job_id = _submit(any_client)
    with get_database().engine.begin() as conn:  # as a worker's claim leaves it
        conn.execute(text("UPDATE job SET status = 'running' WHERE id = :id"), {"id": job_id})
    answers = _cancel_at_once(any_client, job_id)
    assert [r.status_code for r in answers] == [200] * CALLS  # asking again is harmless
    assert all(r.json()["status"] == "running" for r in answers)
    assert [e["detail"] for e in _events(any_client, job_id)] == [{"status": "running"}]
