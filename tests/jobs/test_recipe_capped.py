"""The capped regime's rule (app/jobs/recipe.py): where the full-batch default would
hit the noise cap and the calibration part is too small for the fine DP calibration, or the
schema has many inputs, the tutorial's Poisson mini-batches (256 rows, or all of them) instead.

What the tests pin: the regime is read from public quantities only (the target, delta, the
parts' row counts, the schema's inputs), what the request set is kept, the batch follows the
row count, and a plan with the rule never spends more than its target.
"""

from typing import Any

import pytest

from app.datasets.models import Dataset
from app.jobs import recipe
from app.jobs import service as job_service
from app.jobs.schemas import FULL_BATCH_EPOCHS, JobCreate, TrainingConfig
from app.jobs.size_floor import gaussian_noise
from app.privacy import accounting
from worker import calibration

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow


def _training(**given: Any) -> TrainingConfig:
    return TrainingConfig.model_validate(given)


@pytest.mark.parametrize(("target", "capped"), [(0.5, True), (1.0, True), (1.19, True),
                                                (1.25, False), (3.0, False), (None, False)])
def test_the_regime_is_where_the_full_batch_default_needs_more_than_the_largest_noise(
    target: float | None, capped: bool,
) -> None:
    assert recipe.full_batch_capped(target_epsilon=target, delta=1e-5) is capped
    if target is not None:  # the definition, checked with the accountant the plan uses
        run = accounting.Mechanism(accounting.MAX_NOISE_MULTIPLIER, 1.0, FULL_BATCH_EPOCHS)
        spent = accounting.PRVAccountant().epsilon([run], 1e-5)
        assert (spent > target) is capped


def test_the_batch_is_the_capped_batch_or_the_whole_part_when_smaller() -> None:
    sizes = [recipe.capped_batch_size(n) for n in (40, 255, 256, 4_000, 4_000_000)]
    assert sizes == [40, 255, 256, recipe.CAPPED_BATCH, recipe.CAPPED_BATCH]
    assert recipe.CAPPED_BATCH == 256


def test_small_calibration_is_below_a_multiple_of_the_fine_releases_floor() -> None:
    assert recipe.CALIBRATION_BINS == calibration.FLOOR_BINS
    assert recipe.SMALL_CALIBRATION_FACTOR >= calibration.COARSE_BELOW  # every coarse part
    for target in (0.5, 1.0):
        noise = gaussian_noise(target, 1e-5)  # a full-batch plan's held-out noise: one Gaussian
        limit = recipe.SMALL_CALIBRATION_FACTOR * calibration.size_floor_rows(noise)
        assert recipe.small_calibration(target_epsilon=target, delta=1e-5,
                                        n_calibration=int(limit) - 1)
        assert not recipe.small_calibration(target_epsilon=target, delta=1e-5,
                                            n_calibration=int(limit) + 1)
    sizes = [recipe.small_calibration(target_epsilon=e, delta=1e-5, n_calibration=600)
             for e in (0.5, 1.0, 3.0)]
    assert sizes == [True, False, False]  # more noise, a larger floor


def _capped(training: TrainingConfig, target: float = 0.5, n_train: int = 3_000,
            n_calibration: int = 200, inputs: int = 6) -> TrainingConfig:
    return recipe.capped_regime(training, target_epsilon=target, delta=1e-5, n_train=n_train,
                                n_calibration=n_calibration, inputs=inputs)


def test_many_inputs_take_the_mini_batch_recipe_at_any_row_count() -> None:
    large = {"n_train": 21_000, "n_calibration": 4_500}  # the fine calibration carries it
    assert _capped(_training(), **large) == _training()
    assert _capped(_training(), inputs=recipe.MANY_INPUTS - 1, **large) == _training()
    wide = _capped(_training(), inputs=recipe.MANY_INPUTS, **large)
    assert (wide.batch_size, wide.optimizer) == (recipe.CAPPED_BATCH, recipe.CAPPED_OPTIMIZER)
    for target in (1.25, 3.0):  # not capped: the full batch, whatever the inputs
        assert _capped(_training(), target=target, inputs=37, **large) == _training()
    assert recipe.capped_regime_applies(target_epsilon=1.0, delta=1e-5, n_calibration=100,
                                        inputs=1)


def test_the_rule_fills_the_regime_only_where_the_request_left_it_to_the_defaults() -> None:
    filled = _capped(_training())
    assert filled.batch_size == recipe.capped_batch_size(3_000) < 3_000
    assert filled.epochs == recipe.CAPPED_EPOCHS
    assert (filled.optimizer, filled.learning_rate) == (recipe.CAPPED_OPTIMIZER,
                                                        recipe.CAPPED_LEARNING_RATE)
    assert (filled.momentum, filled.max_grad_norm, filled.tail_average) == (
        recipe.CAPPED_MOMENTUM, recipe.CAPPED_CLIP, recipe.CAPPED_TAIL_AVERAGE)
    assert _capped(filled) == filled
    assert _capped(_training(), target=3.0) == _training()  # not capped
    assert _capped(_training(), n_calibration=2_000) == _training()  # calibration carries it
    for given in ({"batch_size": 64}, {"epochs": 5}):  # the user chose the regime
        assert _capped(_training(**given)) == _training(**given)
    kept = _capped(
        _training(optimizer="adam", learning_rate=0.05, max_grad_norm=0.3, tail_average=0.5))
    assert (kept.optimizer, kept.learning_rate, kept.momentum) == ("adam", 0.05, 0.9)
    assert (kept.max_grad_norm, kept.tail_average) == (0.3, 0.5)
    assert kept.batch_size == filled.batch_size


@pytest.mark.parametrize("n_rows", [400, 600, 1_200])
@pytest.mark.parametrize("target", [0.3, 0.5, 1.0])
def test_a_plan_with_the_rule_is_mini_batch_and_within_its_target(n_rows: int,
                                                                   target: float) -> None:
    dataset = Dataset(id=1, n_rows=n_rows, n_train=int(0.7 * n_rows),
                      n_calibration=int(0.15 * n_rows), budget_delta=None, public=False,
                      schema_json=None)
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": target}})
    delta = job_service.plan(dataset=dataset, request=request).delta
    ruled = request.model_copy(update={"training": recipe.capped_regime(
        request.training, target_epsilon=target, delta=delta, n_train=dataset.n_train,
        n_calibration=dataset.n_calibration, inputs=recipe.n_inputs(dataset))})
    job = job_service.plan(dataset=dataset, request=ruled)
    assert job.training["optimizer"] == recipe.CAPPED_OPTIMIZER
    rate, _ = accounting.poisson_plan(dataset.n_train, min(256, dataset.n_train))
    assert job.sample_rate == rate and job.training["batch_size"] == min(256, dataset.n_train)
    assert job.max_grad_norm == recipe.CAPPED_CLIP  # the fixed clip, not the full-batch rule
    planned = job_service.planned_epsilon(job)["prv"]
    assert planned is not None and planned <= target


def _numeric_schema(n_features: int) -> dict[str, Any]:
    return {"features": [{"name": f"lab_{k}", "kind": "numeric", "lower": 0.0, "upper": 10.0,
                          "reference": 5.0} for k in range(n_features)],
            "outcome": {"name": "event", "label": "an event",
                        "bands": {"low_medium": 0.05, "medium_high": 0.2}}}


@pytest.mark.parametrize(("n_features", "mini_batch"), [(recipe.MANY_INPUTS - 1, False),
                                                        (recipe.MANY_INPUTS, True)])
def test_a_large_tables_plan_follows_its_declared_inputs(n_features: int,
                                                         mini_batch: bool) -> None:
    dataset = Dataset(id=1, n_rows=30_000, n_train=21_000, n_calibration=4_500,
                      budget_delta=None, public=False, schema_json=_numeric_schema(n_features))
    assert recipe.n_inputs(dataset) == n_features
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": 1.0}})
    job = job_service.plan(dataset=dataset, request=request)
    assert (job.training["batch_size"] == recipe.CAPPED_BATCH) is mini_batch
    assert (job.training["optimizer"] == recipe.CAPPED_OPTIMIZER) is mini_batch
    planned = job_service.planned_epsilon(job)["prv"]
    assert planned is not None and planned <= 1.0


@pytest.mark.parametrize(("target", "mini_batch"), [(1.0, True), (3.0, False), (8.0, False)])
def test_at_a_large_delta_a_part_no_calibration_can_correct_takes_the_mini_batch_recipe(
    target: float, mini_batch: bool,
) -> None:
    """A 430-row table whose budget's delta is the largest allowed (1/(10 n)): 1,000
    full-batch steps reach epsilon 1 there, so the noise cap no longer picks the regime. Its
    65 calibration rows are below the fine calibration's floor at epsilon 1 (no release: the
    full-batch model's own, over-confident, probabilities would stand) but not at 3 or 8,
    where the full batch ranks better and the calibration corrects its scale."""
    n_rows = 430
    dataset = Dataset(id=1, n_rows=n_rows, n_train=300, n_calibration=65,
                      budget_delta=0.1 / n_rows, public=False, schema_json=None)
    request = JobCreate.model_validate({"dataset_id": 1,
                                        "privacy": {"target_epsilon": target}})
    job = job_service.plan(dataset=dataset, request=request)
    assert not recipe.full_batch_capped(target_epsilon=target, delta=job.delta)
    noise = gaussian_noise(target, job.delta)
    below = dataset.n_calibration < calibration.size_floor_rows(noise)
    assert below is mini_batch is recipe.calibration_cannot_release(
        target_epsilon=target, delta=job.delta, n_calibration=dataset.n_calibration)
    assert (job.sample_rate < 1.0) is mini_batch
    assert (job.training["optimizer"] == recipe.CAPPED_OPTIMIZER) is mini_batch
    planned = job_service.planned_epsilon(job)["prv"]
    assert planned is not None and planned <= target
    given = request.model_copy(update={"training": _training(batch_size=n_rows // 2 - 15)})
    assert job_service.plan(dataset=dataset, request=given).training["optimizer"] == "adam"


@pytest.mark.parametrize(("target", "budget_delta", "mini_batch"), [
    (1.1, None, True),  # capped at the default delta: many inputs take the mini-batch plan
    (3.0, None, False),  # above the cap: full-batch Adam, as docs/privacy.md says
    (1.1, 1e-4, False),  # a larger delta lifts the cap (to about 1.0): full batch again
])
def test_many_inputs_choose_the_mini_batch_plan_only_below_the_cap(
    target: float, budget_delta: float | None, mini_batch: bool,
) -> None:
    dataset = Dataset(id=1, n_rows=1_000, n_train=700, n_calibration=150,
                      budget_delta=budget_delta, public=False,
                      schema_json=_numeric_schema(2 * recipe.MANY_INPUTS))
    request = JobCreate.model_validate({"dataset_id": 1,
                                        "privacy": {"target_epsilon": target}})
    job = job_service.plan(dataset=dataset, request=request)
    assert not recipe.calibration_cannot_release(target_epsilon=target, delta=job.delta,
                                                 n_calibration=150)
    assert recipe.full_batch_capped(target_epsilon=target, delta=job.delta) is mini_batch
    assert (job.training["optimizer"] == recipe.CAPPED_OPTIMIZER) is mini_batch
    assert (job.sample_rate < 1.0) is mini_batch
