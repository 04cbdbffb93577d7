"""Idempotency-Key on POST /v1/jobs and /v1/datasets, on SQLite and PostgreSQL: the same key
and body return the same resource, another body is 422, and a retry never reserves twice."""

import threading
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FAST_TRAINING, SMALL_DATASET, small_dataset

JOB = {"privacy": {"noise_multiplier": 2.0}, "training": FAST_TRAINING}


def _dataset(client: TestClient, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/datasets", json=SMALL_DATASET, headers=headers)


def _report(client: TestClient, dataset_id: int) -> Any:
    return client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()


def test_a_retried_job_returns_the_same_job_and_reserves_once(any_client: TestClient) -> None:
    dataset_id = _dataset(any_client).json()["id"]
    body = {"dataset_id": dataset_id, **JOB}
    first = any_client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "job-1"})
    assert first.status_code == 202, first.text
    spent = _report(any_client, dataset_id)["spent"]["epsilon"]
    # Same body with keys in another order: the same request.
    reordered = {"training": FAST_TRAINING, "privacy": {"noise_multiplier": 2.0},
                 "dataset_id": dataset_id}
    again = any_client.post("/v1/jobs", json=reordered, headers={"Idempotency-Key": "job-1"})
    assert again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotency-replayed"] == "true"
    assert again.headers["location"] == first.headers["location"]
    report = _report(any_client, dataset_id)
    assert len(report["entries"]) == 1 and report["spent"]["epsilon"] == spent
    jobs = any_client.get("/v1/jobs", params={"dataset_id": dataset_id}).json()
    assert jobs["total"] == 1


def test_the_same_key_with_another_body_is_422_and_writes_nothing(
    any_client: TestClient,
) -> None:
    dataset_id = _dataset(any_client).json()["id"]
    body = {"dataset_id": dataset_id, **JOB}
    assert any_client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k"}).status_code \
        == 202
    other = {**body, "privacy": {"noise_multiplier": 3.0}}
    response = any_client.post("/v1/jobs", json=other, headers={"Idempotency-Key": "k"})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"].endswith("/idempotency-key-reused")
    assert response.json()["errors"][0]["field"] == "Idempotency-Key"
    assert len(_report(any_client, dataset_id)["entries"]) == 1


def test_keys_are_per_route_and_optional(any_client: TestClient) -> None:
    first = _dataset(any_client, key="shared")
    assert first.status_code == 201
    again = _dataset(any_client, key="shared")
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotency-replayed"] == "true"
    # The same key on the jobs route is another key.
    body = {"dataset_id": first.json()["id"], **JOB}
    job = any_client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "shared"})
    assert job.status_code == 202 and "idempotency-replayed" not in job.headers
    # Without a key every POST creates (a source of its own each time: the same source twice
    # is refused).
    bodies = [small_dataset() for _ in range(3)][1:]  # the first is SMALL_DATASET, used above
    created = [any_client.post("/v1/datasets", json=body) for body in bodies]
    assert [r.status_code for r in created] == [201, 201]
    assert created[0].json()["id"] != created[1].json()["id"]


def test_concurrent_attempts_with_one_key_create_one_job(any_client: TestClient) -> None:
    dataset_id = _dataset(any_client).json()["id"]
    body = {"dataset_id": dataset_id, **JOB}
    start = threading.Barrier(8)
    answers: list[Any] = []
    lock = threading.Lock()

    def attempt() -> None:
        start.wait()
        response = any_client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "race"})
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.status_code for r in answers} == {202}, [r.text for r in answers]
    assert len({r.json()["id"] for r in answers}) == 1
    report = _report(any_client, dataset_id)
    assert len(report["entries"]) == 1
    verify = any_client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    assert verify["valid"] and verify["records"] == 2  # budget + one reserve


@pytest.mark.parametrize("key", ["has space", "", "x" * 201, "tab\there"])
def test_malformed_keys_are_422_naming_the_header(any_client: TestClient, key: str) -> None:
    response = any_client.post("/v1/datasets", json=SMALL_DATASET,
                               headers={"Idempotency-Key": key})
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == "Idempotency-Key"
    assert "printable ASCII" in error["allowed"]
    assert any_client.get("/v1/datasets").json()["total"] == 0


def test_keys_belong_to_the_api_key_that_sent_them(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """A data scientist's ``Idempotency-Key: 1`` and an admin's ``1`` are two keys: the admin's
    retry never replays (nor reveals) the data scientist's job, and each is replayed to its own
    sender only."""
    scientist, other_scientist = client_as("data_scientist"), client_as("data_scientist")
    dataset_id = _dataset(any_client).json()["id"]
    body = {"dataset_id": dataset_id, **JOB}
    theirs = scientist.post("/v1/jobs", json=body, headers={"Idempotency-Key": "1"})
    assert theirs.status_code == 202, theirs.text

    mine = any_client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "1"})
    assert mine.status_code == 202 and "idempotency-replayed" not in mine.headers
    assert mine.json()["id"] != theirs.json()["id"]
    # Another body under the same key is this caller's business alone: no 422 from theirs.
    other_body = {**body, "privacy": {"noise_multiplier": 3.0}}
    also_new = other_scientist.post("/v1/jobs", json=other_body,
                                    headers={"Idempotency-Key": "1"})
    assert also_new.status_code == 202 and "idempotency-replayed" not in also_new.headers

    for caller, first in ((scientist, theirs), (any_client, mine)):
        again = caller.post("/v1/jobs", json=body, headers={"Idempotency-Key": "1"})
        assert again.headers["idempotency-replayed"] == "true"
        assert again.json()["id"] == first.json()["id"]
    assert len(_report(any_client, dataset_id)["entries"]) == 3
