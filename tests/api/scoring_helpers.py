"""Helpers shared by the scoring, registry, FHIR and CDS Hooks API tests."""

from typing import Any

from fastapi.testclient import TestClient
from httpx import Response

from tests.conftest import small_dataset

PROBLEM_JSON = "application/problem+json"
QUICK_JOB = {"privacy": {"noise_multiplier": 1.5}, "training": {"epochs": 1, "batch_size": 256}}
"""One noisy epoch: a real DP-SGD model in about a second, cheap enough to train several."""


def train_models(client: TestClient, run_worker: Any, count: int = 1) -> list[int]:
    """Register a dataset, train ``count`` models on it, return their ids in training order."""
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    job_ids = []
    for _ in range(count):
        submitted = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                                  **QUICK_JOB})
        assert submitted.status_code == 202, submitted.text
        job_ids.append(submitted.json()["id"])
    assert run_worker() == count
    model_ids = []
    for job_id in job_ids:
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] == "succeeded", job
        model_ids.append(int(job["model_id"]))
    return model_ids


def problem(response: Response, status: int, *, field: str | None = None,
            allowed: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """A problem+json body with ``status``, optionally naming ``field`` and its range."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body = response.json()
    assert body["status"] == status and body["detail"], body
    if kind is not None:
        assert body["type"].endswith(f"/{kind}"), body
    if field is not None:
        named = [e for e in body.get("errors", []) if e.get("field") == field]
        assert named, f"no error names {field!r}: {body}"
        if allowed is not None:
            assert any(e.get("allowed") == allowed for e in named), named
    return body
