"""Overload is a 503 with ``Retry-After``, never a 500: a request that finds no free database
connection in time, and a burst of job submissions on one dataset (each answer 202, 409 or
503, and only a 202 leaves a job)."""

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from app.core.database import Database, get_database, set_database
from app.core.settings import settings
from tests.conftest import bearer, new_key, small_dataset


@pytest.fixture
def tiny_pool(any_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    """The app's database again, through a pool of two connections and a short wait."""
    monkeypatch.setattr(settings, "database_pool_size", 2)
    monkeypatch.setattr(settings, "database_max_overflow", 0)
    monkeypatch.setattr(settings, "database_pool_timeout_seconds", 0.3)
    previous = get_database()
    database = Database(previous.url)
    set_database(database)
    try:
        yield database
    finally:
        set_database(previous)
        database.dispose()


def test_no_free_connection_is_a_503_with_retry_after(
    any_client: TestClient, tiny_pool: Database
) -> None:
    key = new_key("data_scientist")
    held = [tiny_pool.engine.connect() for _ in range(2)]
    try:
        response = any_client.get("/v1/jobs", headers=bearer(key))
    finally:
        for connection in held:
            connection.close()
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "2"
    assert response.json()["type"].endswith("/overloaded")
    assert any_client.get("/v1/jobs", headers=bearer(key)).status_code == 200  # freed: served


async def _burst(client: TestClient, key: str, dataset_id: int, n: int) -> list[int]:
    transport = httpx.ASGITransport(app=client.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 headers=bearer(key)) as http:
        body = {"dataset_id": dataset_id, "privacy": {"target_epsilon": 1.0}}
        answers = await asyncio.gather(*(http.post("/v1/jobs", json=body) for _ in range(n)))
    for answer in answers:
        if answer.status_code == 503:
            assert answer.headers["retry-after"] == "2"
    return [answer.status_code for answer in answers]


@pytest.mark.slow
def test_fifty_concurrent_submissions_answer_only_202_409_or_503(
    any_client: TestClient, tiny_pool: Database
) -> None:
    dataset = any_client.post("/v1/datasets", json=small_dataset()).json()
    key = new_key("data_scientist")
    codes = Counter(asyncio.run(_burst(any_client, key, dataset["id"], 50)))
    assert set(codes) <= {202, 409, 503}, codes
    assert codes[202] >= 1, codes
    jobs = any_client.get("/v1/jobs", params={"dataset_id": dataset["id"]}).json()
    assert len(jobs["items"]) == codes[202]  # a 503 or a 409 left no job behind
