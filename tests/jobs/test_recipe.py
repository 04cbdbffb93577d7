"""The default recipe's public rules (app/jobs/recipe.py): fewer default epochs for a small
target epsilon instead of a 422, a clip norm from the row count, the schema and the noise, and
Adam with a learning rate by model (SGD on request; stored jobs keep the SGD they were planned
with).

The rules were chosen by bench/proxy_study.py; these tests pin what they promise: only public
quantities in, the planned epsilon never above the target, and what the user set is kept.
"""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.datasets.schema.dataset_schema import DatasetSchema
from app.jobs import recipe
from app.jobs import service as job_service
from app.jobs.schemas import FULL_BATCH_EPOCHS, MINI_BATCH_EPOCHS, JobCreate
from app.privacy import accounting
from tests.conftest import small_dataset
from worker.tasks import spec_of


def _dataset(n_rows: int = 8000, schema: dict[str, Any] | None = None) -> Dataset:
    return Dataset(id=1, n_rows=n_rows, n_train=int(0.7 * n_rows),
                   n_calibration=int(0.15 * n_rows), budget_delta=None, public=False,
                   schema_json=schema)


def _plan(dataset: Dataset, privacy: dict[str, Any], training: dict[str, Any] | None = None):
    request = JobCreate.model_validate(
        {"dataset_id": 1, "privacy": privacy, "training": training or {}})
    return job_service.plan(dataset=dataset, request=request)


def _prv(job: Any) -> float:
    epsilon = job_service.planned_epsilon(job)["prv"]
    assert epsilon is not None
    return epsilon


@pytest.mark.parametrize("target", [1.0, 0.5, 0.3])
def test_a_small_target_with_default_epochs_is_planned_with_fewer_epochs(target: float) -> None:
    """1000 full-batch steps at the noise cap spend 1.2 at delta 1e-5; the plan takes the most
    epochs that reach the target instead of refusing."""
    job = _plan(_dataset(200_000), {"target_epsilon": target})  # large: not the capped regime
    assert job.epochs < FULL_BATCH_EPOCHS and job.steps == job.epochs  # full batch: q = 1
    assert job.training["epochs"] == job.epochs  # the answer shows the epochs used
    assert _prv(job) <= target
    assert job.noise_multiplier <= accounting.MAX_NOISE_MULTIPLIER
    # The most epochs that fit: one more would not reach the target even at the cap.
    more = accounting.Mechanism(accounting.MAX_NOISE_MULTIPLIER, 1.0, job.steps + 1)
    assert accounting.PRVAccountant().epsilon([more], job.delta) > target


def test_epsilon_half_takes_the_202_epochs_the_issue_measured() -> None:
    job = _plan(_dataset(), {"target_epsilon": 0.5, "delta": 1e-5})
    assert job.epochs == 202


def test_fewer_mini_batch_epochs_too_when_the_epochs_are_defaulted() -> None:
    # 5,600 training rows at batch 4096: q = 0.5, 2 steps an epoch; 20 epochs spend 0.097.
    job = _plan(_dataset(), {"target_epsilon": 0.05, "delta": 1e-5}, {"batch_size": 4096})
    assert 1 <= job.epochs < MINI_BATCH_EPOCHS
    assert job.steps == 2 * job.epochs
    assert _prv(job) <= 0.05


def test_epochs_the_user_set_are_kept_and_an_unreachable_target_is_still_a_422() -> None:
    for epochs, floor in ((FULL_BATCH_EPOCHS, "1.2"), (500, "0.82")):
        with pytest.raises(InvalidRequest) as refused:
            _plan(_dataset(), {"target_epsilon": 0.5}, {"epochs": epochs})
        assert refused.value.field == "privacy.target_epsilon"
        assert refused.value.extra["allowed"] == f"[{floor}, 100]"


def test_a_target_no_single_epoch_reaches_is_a_422() -> None:
    with pytest.raises(InvalidRequest) as refused:
        _plan(_dataset(200_000), {"target_epsilon": 0.001})
    assert refused.value.field == "privacy.target_epsilon"


def test_the_default_clip_follows_the_public_rule_and_an_explicit_one_is_kept() -> None:
    job = _plan(_dataset(), {"target_epsilon": 1.0})
    inputs = recipe.n_inputs(_dataset())
    expected = recipe.default_clip(noise_multiplier=job.noise_multiplier, sample_rate=1.0,
                                   steps=job.steps, n_train=5600, inputs=inputs)
    assert job.max_grad_norm == job.training["max_grad_norm"] == expected
    kept = _plan(_dataset(), {"target_epsilon": 1.0}, {"max_grad_norm": 0.7})
    assert kept.max_grad_norm == 0.7
    assert kept.noise_multiplier == job.noise_multiplier  # the clip never changes the noise


def test_the_clip_grows_with_rows_and_epsilon_and_shrinks_with_inputs() -> None:
    small, large = _plan(_dataset(400), {"target_epsilon": 1.0}, {"batch_size": 280}), _plan(
        _dataset(200_000), {"target_epsilon": 1.0})  # full batch (the capped regime: clip 1)
    assert small.max_grad_norm == recipe.CLIP_MIN and large.max_grad_norm == recipe.CLIP_MAX
    clips = [_plan(_dataset(5000), {"target_epsilon": eps}).max_grad_norm for eps in (1, 3, 8)]
    assert clips == sorted(clips) and clips[0] < clips[-1]
    wide = DatasetSchema.model_validate({
        "features": [{"name": f"x{i}", "kind": "numeric", "lower": 0, "upper": 1,
                      "reference": 0} for i in range(30)],
        "outcome": {"name": "event"}}).model_dump(mode="json")
    narrow = _plan(_dataset(4000), {"target_epsilon": 3.0}).max_grad_norm
    assert _plan(_dataset(4000, wide), {"target_epsilon": 3.0}).max_grad_norm < narrow


def test_non_private_public_training_gets_the_largest_clip() -> None:
    dataset = _dataset()
    dataset.public = True
    assert _plan(dataset, {"noise_multiplier": 0}).max_grad_norm == recipe.CLIP_MAX


def test_epsilon_half_with_defaults_is_accepted_and_reserved_as_planned(
    client: TestClient,
) -> None:
    created = client.post("/v1/datasets", json=small_dataset())
    assert created.status_code == 201, created.text
    dataset_id = created.json()["id"]
    response = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                             "privacy": {"target_epsilon": 0.5}})
    assert response.status_code == 202, response.text
    job = response.json()  # full batch with fewer epochs, or the capped regime's mini-batches
    assert job["progress"]["epochs"] == job["training"]["epochs"] < FULL_BATCH_EPOCHS
    assert job["privacy"]["steps"] % job["training"]["epochs"] == 0
    assert job["privacy"]["epsilon_planned"]["pld"] <= 0.5
    assert recipe.CLIP_MIN <= job["privacy"]["max_grad_norm"] <= recipe.CLIP_MAX
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    assert report["spent"]["epsilon"] <= 0.5 + 1e-9


def test_the_default_optimizer_is_adam_with_its_learning_rate_stored_on_the_job() -> None:
    job = _plan(_dataset(), {"target_epsilon": 3.0})
    assert job.epochs == FULL_BATCH_EPOCHS == 1000
    assert job.training["optimizer"] == "adam"
    assert job.training["learning_rate"] == recipe.default_learning_rate("adam", "logistic")
    mlp = _plan(_dataset(), {"target_epsilon": 3.0}, {"model": "mlp"})
    assert mlp.training["learning_rate"] == recipe.default_learning_rate("adam", "mlp") < 0.3


def test_sgd_on_request_gets_its_own_default_and_a_set_learning_rate_is_kept() -> None:
    sgd = _plan(_dataset(), {"target_epsilon": 3.0}, {"optimizer": "sgd"})
    assert (sgd.training["optimizer"], sgd.training["learning_rate"]) == ("sgd", 0.5)
    kept = _plan(_dataset(), {"target_epsilon": 3.0}, {"learning_rate": 0.05})
    assert (kept.training["optimizer"], kept.training["learning_rate"]) == ("adam", 0.05)


def test_the_optimizer_never_changes_the_mechanism() -> None:
    """Whatever the noisy gradient drives is post-processing: same noise, rate, steps, clip."""
    adam = _plan(_dataset(), {"target_epsilon": 1.0})
    sgd = _plan(_dataset(), {"target_epsilon": 1.0}, {"optimizer": "sgd"})
    assert job_service.mechanism_of(adam) == job_service.mechanism_of(sgd)
    assert adam.max_grad_norm == sgd.max_grad_norm


def test_a_job_stored_before_the_optimizer_was_named_keeps_its_sgd() -> None:
    job = _plan(_dataset(), {"target_epsilon": 3.0})
    assert spec_of(job).optimizer == "adam" and spec_of(job).learning_rate == 0.3
    job.training = {k: v for k, v in job.training.items() if k != "optimizer"}
    job.training["learning_rate"] = 0.5
    legacy = spec_of(job)
    assert (legacy.optimizer, legacy.learning_rate, legacy.momentum) == ("sgd", 0.5, 0.9)

