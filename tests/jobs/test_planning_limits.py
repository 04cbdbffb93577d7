"""Planning a legal request has a bounded cost; what cannot be planned is a 422 naming the field.

(The cost itself is measured by bench/planning_cost.py, not timed here.)
"""

import pytest
from fastapi.testclient import TestClient

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.jobs import service as job_service
from app.jobs.schemas import JobCreate
from tests.api.scoring_helpers import problem


def _request(training: dict) -> JobCreate:
    return JobCreate.model_validate(
        {"dataset_id": 1, "privacy": {"target_epsilon": 100}, "training": training}
    )


def test_a_plan_training_could_never_finish_is_refused_with_the_epochs_that_fit() -> None:
    dataset = Dataset(id=1, n_rows=2_000_000, n_train=1_400_000, n_calibration=300_000,
                      budget_delta=5e-8, public=False)
    request = _request({"batch_size": 8, "epochs": 1000, "model": "mlp", "hidden_units": 256})
    with pytest.raises(InvalidRequest) as refused:
        job_service.plan(dataset=dataset, request=request)
    assert refused.value.field == "training.epochs"
    most = job_service.MAX_TOTAL_STEPS // 175_000  # steps per epoch at batch size 8
    assert refused.value.extra["allowed"] == f"[1, {most}]"


def test_the_largest_plan_that_fits_is_planned() -> None:
    dataset = Dataset(id=1, n_rows=2_000_000, n_train=1_400_000, n_calibration=300_000,
                      budget_delta=5e-8, public=False)
    epochs = job_service.MAX_TOTAL_STEPS // 175_000
    job = job_service.plan(dataset=dataset, request=_request({"batch_size": 8, "epochs": epochs}))
    assert job.steps == epochs * 175_000 <= job_service.MAX_TOTAL_STEPS
    assert job.noise_multiplier > 0


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_the_request_that_took_the_api_down_is_a_422(client: TestClient) -> None:
    """2,000,000 rows, batch 8, 1000 epochs, an MLP: was 79 s of PRV and an OOM kill."""
    created = client.post("/v1/datasets", json={
        "name": "huge", "source": {"kind": "synthetic", "n_rows": 2_000_000, "seed": 3},
        "privacy_budget": {"epsilon": 100, "delta": 5e-8}, "public": False})
    assert created.status_code == 201, created.text
    response = client.post("/v1/jobs", json={
        "dataset_id": created.json()["id"], "privacy": {"target_epsilon": 100},
        "training": {"batch_size": 8, "epochs": 1000, "model": "mlp", "hidden_units": 256}})
    steps_per_epoch = -(-created.json()["training_rows"] // 8)
    most = job_service.MAX_TOTAL_STEPS // steps_per_epoch
    problem(response, 422, field="training.epochs", allowed=f"[1, {most}]")
