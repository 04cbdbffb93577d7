"""Shared pieces of the statistics tests: the documented example request and small helpers."""

import re
from typing import Any

from fastapi.testclient import TestClient

AGE_BANDS = [18, 30, 45, 65, 81]
PHQ9_BINS = [0, 5, 10, 15, 20, 28]
EXAMPLE_QUERIES: list[dict[str, Any]] = [
    {"kind": "count"},
    {"kind": "prevalence"},
    {"kind": "mean", "feature": "num_sessions"},
    {"kind": "histogram", "feature": "phq9", "bins": PHQ9_BINS},
    {"kind": "prevalence", "by": ["sex", {"feature": "age", "bins": AGE_BANDS}]},
]
EXAMPLE = {"queries": EXAMPLE_QUERIES, "privacy": {"epsilon": 0.5}}


def ask(client: TestClient, dataset_id: int, body: dict[str, Any], **headers: str) -> Any:
    return client.post(f"/v1/datasets/{dataset_id}/statistics", json=body, headers=headers)


def report(client: TestClient, dataset_id: int) -> dict[str, Any]:
    response = client.get(f"/v1/datasets/{dataset_id}/privacy-report")
    assert response.status_code == 200, response.text
    return response.json()


def fields_of(problem: dict[str, Any]) -> list[str]:
    """The fields a problem names, list indices written ``[0]`` (pydantic writes ``.0``)."""
    return [re.sub(r"\.(\d+)", r"[\1]", e["field"]) for e in problem.get("errors", [])]
