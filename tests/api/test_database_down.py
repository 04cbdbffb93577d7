"""A database that does not answer is a 503 problem+json with a retry hint, on every kind of
route (the key lookup included), never a 500 and never a partial write."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.database import Database, set_database
from app.main import create_app
from tests.conftest import SMALL_DATASET

UNREACHABLE = "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=1"


@pytest.fixture
def down_client() -> Iterator[TestClient]:
    database = Database(UNREACHABLE)
    set_database(database)
    try:
        yield TestClient(create_app(embedded_worker=False), raise_server_exceptions=False)
    finally:
        set_database(None)
        database.dispose()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/datasets", SMALL_DATASET),
        ("POST", "/v1/jobs", {"dataset_id": 1, "privacy": {"target_epsilon": 1}}),
        ("GET", "/v1/jobs", None),
        ("GET", "/v1/datasets/1/privacy-report", None),
    ],
)
def test_an_unreachable_database_is_a_503_with_retry_after(
    down_client: TestClient, method: str, path: str, body: dict | None
) -> None:
    response = down_client.request(method, path, json=body,
                                   headers={"Authorization": "Bearer dpk_" + "x" * 40})
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "2"
    problem = response.json()
    assert problem["type"].endswith("/database-unavailable")
    assert "nothing was written" in problem["detail"]


def test_health_still_answers_and_readiness_says_not_ready(down_client: TestClient) -> None:
    assert down_client.get("/healthz").status_code == 200
    assert down_client.get("/readyz").status_code == 503
