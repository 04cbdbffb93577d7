"""A model's first monitoring run also releases the training cohort's feature histograms as a
statistics release at the run's epsilon, so a run's epsilon has the statistics' floor: below
it the request is a 422 naming the field and its range (it was a 500 when the reference
release refused the epsilon inside the route), at it the first run succeeds."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.statistics.schemas import MIN_EPSILON
from tests.api.scoring_helpers import problem


def test_an_epsilon_below_the_floor_is_a_422_naming_the_range(client: TestClient) -> None:
    body = problem(client.post("/v1/models/1/monitoring-runs", json={
        "dataset_id": 1, "privacy": {"target_epsilon": MIN_EPSILON / 2}}), 422,
        field="privacy.target_epsilon")
    assert body["errors"][0]["allowed"] == f"[{MIN_EPSILON}, 100]"


@pytest.mark.slow  # trains a model
def test_a_first_run_at_the_floor_succeeds(client: TestClient, run_worker: Any) -> None:
    training = client.post("/v1/datasets", json={
        "name": "train", "source": {"kind": "synthetic", "n_rows": 4000, "seed": 5},
        "privacy_budget": {"epsilon": 10.0, "delta": 1e-6}}).json()
    job = client.post("/v1/jobs", json={"dataset_id": training["id"],
                                        "privacy": {"target_epsilon": 3.0},
                                        "training": {"epochs": 2, "batch_size": 256}})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    model = client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    follow_up = client.post("/v1/datasets", json={
        "name": "follow-up", "source": {"kind": "synthetic", "n_rows": 4000, "seed": 6},
        "privacy_budget": {"epsilon": 10.0, "delta": 1e-6},
        "follow_up": {"model_id": model, "period_start": "2026-01-01",
                      "period_end": "2026-06-30"}}).json()
    queued = client.post(f"/v1/models/{model}/monitoring-runs", json={
        "dataset_id": follow_up["id"], "privacy": {"target_epsilon": MIN_EPSILON}})
    assert queued.status_code == 202, queued.text
    assert queued.json()["reference_release_id"] is not None  # the first run's reference
    assert run_worker() == 1
    done = client.get(f"/v1/monitoring-runs/{queued.json()['id']}").json()
    assert done["status"] == "succeeded", done
