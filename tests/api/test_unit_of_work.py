"""A route's transaction ends one way, before its answer: a failed commit is never a 2xx."""

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from tests.conftest import SMALL_DATASET


@pytest.fixture
def failing_commit() -> Iterator[list[int]]:
    """Make the next commit that would store a dataset fail, as a lost database would."""
    failures: list[int] = []

    def mark(session: Session, _context: object, _instances: object) -> None:
        if any(isinstance(o, Dataset) for o in session.new):
            session.info["stores_dataset"] = True

    def fail(session: Session) -> None:
        if session.info.pop("stores_dataset", False) and not failures:
            failures.append(1)
            raise OperationalError("COMMIT", {}, Exception("the database went away"))

    event.listen(Session, "before_flush", mark)
    event.listen(Session, "before_commit", fail)
    try:
        yield failures
    finally:
        event.remove(Session, "before_commit", fail)
        event.remove(Session, "before_flush", mark)


def _names(client: TestClient) -> list[str]:
    return [d["name"] for d in client.get("/v1/datasets").json()["items"]]


def test_a_failed_commit_answers_an_error_and_stores_nothing(
    client: TestClient, failing_commit: list[int]
) -> None:
    body: dict[str, Any] = {**SMALL_DATASET, "name": "never-stored"}
    response = client.post("/v1/datasets", json=body)
    assert failing_commit == [1]
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "never-stored" not in _names(client)
    retried = client.post("/v1/datasets", json=body)
    assert retried.status_code == 201, retried.text
    assert _names(client).count("never-stored") == 1
