"""A status poll is small: ``GET /v1/jobs/{id}?view=status`` answers a finished training job
in under 2 KB (the full job, ``view=full`` and the default, is many times that) with what a
poll needs and a link to the full job."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FAST_TRAINING, small_dataset

STATUS_FIELDS = {"id", "kind", "dataset_id", "status", "progress", "model_id", "error",
                 "created_at", "started_at", "finished_at", "href"}


@pytest.mark.slow  # trains a model
def test_a_finished_jobs_status_poll_is_under_2_kb(client: TestClient, run_worker: Any,
                                                     client_as: Any) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                        "privacy": {"target_epsilon": 2.0},
                                        "training": FAST_TRAINING}).json()
    assert run_worker() == 1
    scientist = client_as("data_scientist")
    full = scientist.get(f"/v1/jobs/{job['id']}")
    status = scientist.get(f"/v1/jobs/{job['id']}", params={"view": "status"})
    assert full.status_code == status.status_code == 200, status.text
    assert scientist.get(f"/v1/jobs/{job['id']}", params={"view": "full"}).json() == full.json()
    print(f"finished training job: full {len(full.content)} bytes, "
          f"view=status {len(status.content)} bytes")
    assert len(status.content) < 2048 < len(full.content)
    poll = status.json()
    assert set(poll) == STATUS_FIELDS
    assert poll["status"] == "succeeded" and poll["model_id"] == full.json()["model_id"]
    assert poll["progress"] == full.json()["progress"]
    assert scientist.get(poll["href"]).json() == full.json()


def test_a_status_poll_of_a_queued_job_and_a_bad_view(client: TestClient) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                        "privacy": {"target_epsilon": 2.0}}).json()
    poll = client.get(f"/v1/jobs/{job['id']}", params={"view": "status"}).json()
    assert poll["status"] == "queued" and poll["model_id"] is None
    assert poll["href"] == f"/v1/jobs/{job['id']}"
    bad = client.get(f"/v1/jobs/{job['id']}", params={"view": "tiny"})
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "view"
    missing = client.get("/v1/jobs/999999", params={"view": "status"})
    assert missing.status_code == 404
