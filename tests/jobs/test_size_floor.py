"""The size floors (``app.jobs.size_floor``): public inputs only, monotone, the 2-row and 30-row
tables refused at every allowed epsilon before anything is planned, a table at the floor
planned; and the worker's side: a calibration part below its floor releases nothing."""

import inspect
import itertools
import math
from typing import Any

import numpy as np
import pytest
import torch

from app.datasets.models import Dataset
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.encoding import encoder_for
from app.jobs import results, size_floor
from app.jobs import service as job_service
from app.jobs.schemas import JobCreate
from app.jobs.size_floor import DatasetTooSmall
from app.privacy.accounting import (
    MAX_NOISE_MULTIPLIER,
    MIN_NOISE_MULTIPLIER,
    Mechanism,
    gaussian_epsilon,
)
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.registry.network import build_network
from app.reports import held_out_words
from worker import calibration, evaluation
from worker.held_out_floors import held_out_warnings

DELTA = 1e-5
BUILT_IN_INPUTS = encoder_for(BUILT_IN_SCHEMA).n_inputs
EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 8.0, 30.0, 100.0)


def _dataset(n_train: int, n_calibration: int, n_evaluation: int, *,
             public: bool = False) -> Dataset:
    """An unsaved registration with these parts (the crisis schema: no ``schema_json``)."""
    return Dataset(id=7, n_rows=n_train + n_calibration + n_evaluation, n_train=n_train,
                   n_calibration=n_calibration, budget_delta=None, public=public,
                   schema_json=None)


def _plan(dataset: Dataset, privacy: dict[str, Any], training: dict[str, Any] | None = None
          ) -> Any:
    request = JobCreate.model_validate(
        {"dataset_id": 7, "privacy": privacy, "training": training or {}})
    return job_service.plan(dataset=dataset, request=request)


def test_the_floors_read_public_quantities_only() -> None:
    """No argument can carry a row's value: counts, epsilon, delta, inputs, noise and bins."""
    allowed = {"epsilon", "delta", "inputs", "noise_std", "cells", "noise_multiplier", "bins"}
    for function in (size_floor.training_floor, size_floor.held_out_floor,
                     size_floor.calibration_floor, size_floor.evaluation_floor):
        assert set(inspect.signature(function).parameters) <= allowed, function


def test_gaussian_noise_inverts_the_exact_gaussian_epsilon() -> None:
    for epsilon in EPSILONS:
        sigma = size_floor.gaussian_noise(epsilon, DELTA)
        assert gaussian_epsilon([Mechanism(sigma, 1.0, 1)], DELTA) == pytest.approx(
            epsilon, rel=1e-6)
    assert size_floor.gaussian_noise(math.inf, DELTA) == 0.0


def test_the_training_floor_falls_with_epsilon_and_delta_and_grows_with_inputs() -> None:
    for inputs in (1, BUILT_IN_INPUTS, 30):
        floors = [size_floor.training_floor(epsilon=e, delta=DELTA, inputs=inputs)
                  for e in EPSILONS]
        assert floors == sorted(floors, reverse=True), floors
        assert floors[-1] == size_floor.statistical_floor(inputs)  # no noise term left
        assert floors[0] > floors[-1]  # at epsilon 0.05 the noise term binds
        looser = [size_floor.training_floor(epsilon=e, delta=1e-3, inputs=inputs)
                  for e in EPSILONS]
        assert all(a <= b for a, b in zip(looser, floors, strict=True))
        assert size_floor.training_floor(epsilon=math.inf, delta=DELTA,
                                         inputs=inputs) == 10 * (inputs + 1)
    for epsilon in EPSILONS:
        by_inputs = [size_floor.training_floor(epsilon=epsilon, delta=DELTA, inputs=d)
                     for d in (1, 2, 6, 12, 30)]
        assert by_inputs == sorted(by_inputs) and len(set(by_inputs)) == len(by_inputs)


def test_the_held_out_floors_grow_with_the_noise_and_the_bins() -> None:
    noises = (0.0, 0.1, 0.5, 1.0, 3.7, 7.0, 30.0)
    for bins in (10, 18, 25):
        floors = [size_floor.calibration_floor(noise_multiplier=s, bins=bins) for s in noises]
        assert floors == sorted(floors) and floors[0] == 2 * size_floor.MIN_CLASS_ROWS
        # 2 noise stds of the rarer class (at most half the rows), summed over the bins.
        assert floors[-1] == math.ceil(2 * 2.0 * 30.0 * math.sqrt(2) * math.sqrt(bins))
    assert size_floor.evaluation_floor(noise_std=1.0, bins=18) < size_floor.evaluation_floor(
        noise_std=1.0, bins=36)


def test_the_rule_is_the_workers_own() -> None:
    """The evaluation reports a ranking metric only above NOISE_FLOOR noise stds and
    MIN_CLASS_ROWS per class; the calibration fits bins above the same NOISE_FLOOR."""
    assert size_floor.NOISE_FACTOR == evaluation.NOISE_FLOOR == calibration.NOISE_FLOOR
    assert size_floor.MIN_CLASS_ROWS == evaluation.MIN_CLASS_ROWS


def _privacy_requests(public: bool) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = [{"target_epsilon": e} for e in EPSILONS]
    requests += [{"noise_multiplier": s} for s in (MIN_NOISE_MULTIPLIER, 1.0, 10.0,
                                                    MAX_NOISE_MULTIPLIER)]
    return requests + ([{"noise_multiplier": 0.0}] if public else [])


@pytest.mark.parametrize("rows", [2, 30])
def test_tiny_tables_are_refused_at_every_epsilon_whatever_their_split(rows: int) -> None:
    """Every split of 2 or 30 rows into the three parts is below a floor at no noise, for any
    schema (one input is the least): a job needs 10 (inputs + 1) + 2 x 10 >= 40 rows."""
    for inputs in (1, BUILT_IN_INPUTS):
        assert size_floor.upload_floor(inputs) > rows
        for n_train, n_cal in itertools.product(range(rows + 1), repeat=2):
            if n_train + n_cal > rows:
                continue
            dataset = _dataset(n_train, n_cal, rows - n_train - n_cal)
            with pytest.raises(DatasetTooSmall):
                size_floor.check_held_out(dataset)
                size_floor.check_training(dataset=dataset, epsilon=math.inf, delta=DELTA,
                                          inputs=inputs, field=size_floor.TARGET_FIELD)
    # Through the planner, at every allowed target and noise (public datasets: 0 too).
    for public in (False, True):
        dataset = _dataset(int(0.7 * rows), int(0.15 * rows), rows - int(0.85 * rows),
                           public=public)
        for privacy in _privacy_requests(public):
            with pytest.raises(DatasetTooSmall) as refused:
                _plan(dataset, privacy)
            assert refused.value.status == 422
            assert refused.value.field == "dataset_id", privacy
            assert refused.value.extra["rows"] == rows


def test_the_refusal_names_the_rows_the_minimum_and_the_smallest_epsilon() -> None:
    """Above the floor at no noise, a small target epsilon's noise term refuses the job and
    names the target: the smallest epsilon it allows is planned."""
    dataset = _dataset(100, 20, 20)
    with pytest.raises(DatasetTooSmall) as refused:
        _plan(dataset, {"target_epsilon": 0.05})
    error = refused.value
    minimum = size_floor.training_floor(epsilon=0.05, delta=DELTA, inputs=BUILT_IN_INPUTS)
    assert error.field == "privacy.target_epsilon"
    assert error.extra["training_rows"] == 100 < error.extra["minimum_training_rows"] == minimum
    assert f"{minimum}" in error.detail and "100" in error.detail
    least = float(error.extra["allowed"].strip("[]").split(",")[0])
    assert size_floor.training_floor(epsilon=least, delta=DELTA, inputs=BUILT_IN_INPUTS) <= 100
    _plan(dataset, {"target_epsilon": least}, {"epochs": 1})


def test_a_noise_multiplier_job_is_held_to_its_planned_epsilon() -> None:
    dataset = _dataset(100, 20, 20)
    with pytest.raises(DatasetTooSmall) as refused:  # full batch, 1 step: epsilon about 0.05
        _plan(dataset, {"noise_multiplier": 100.0}, {"epochs": 1})
    assert refused.value.field == "privacy.noise_multiplier"
    job = _plan(dataset, {"noise_multiplier": 2.0}, {"epochs": 5})
    assert job.noise_multiplier == 2.0


def test_a_table_at_the_floor_is_planned() -> None:
    floor = size_floor.training_floor(epsilon=1.0, delta=DELTA, inputs=BUILT_IN_INPUTS)
    held = size_floor.HELD_OUT_MIN_ROWS
    job = _plan(_dataset(floor, held, held), {"target_epsilon": 1.0}, {"epochs": 20})
    assert job.steps > 0
    with pytest.raises(DatasetTooSmall):
        _plan(_dataset(floor - 1, held, held), {"target_epsilon": 1.0}, {"epochs": 20})
    with pytest.raises(DatasetTooSmall):
        _plan(_dataset(floor, held - 1, held + 1), {"target_epsilon": 1.0}, {"epochs": 20})


def test_a_calibration_part_below_its_floor_releases_nothing() -> None:
    """Below the floor no count is released and the model keeps its own probabilities; at the
    floor it is calibrated (by the coarse release, up to twice the floor)."""
    rng = np.random.default_rng(5)
    noise = 3.73  # epsilon 1 at delta 1e-5, full batch
    floor = calibration.size_floor_rows(noise)
    x = np.column_stack([rng.integers(18, 81, floor), rng.integers(0, 28, floor),
                         rng.integers(1, 101, floor), rng.integers(0, 51, floor),
                         rng.integers(0, 2, floor), rng.integers(0, 2, floor)]).astype(float)
    y = (rng.random(floor) < 0.3).astype(float)
    history = [Mechanism(83.8, 1.0, 500)]
    network = build_network("logistic")
    before = [p.detach().clone() for p in network.parameters()]
    below = calibration.calibrate_if_meaningful(
        network, x[:-1], y[:-1], history=history, delta=DELTA, training_epsilon=1.0,
        noise_multiplier=noise)
    assert below.method == size_floor.CALIBRATION_WITHHELD and below.rows == floor - 1
    assert below.noisy_counts == [] and (below.slope, below.intercept) == (1.0, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(before, network.parameters(), strict=True))
    at = calibration.calibrate_if_meaningful(
        network, x, y, history=history, delta=DELTA, training_epsilon=1.0,
        noise_multiplier=noise)
    assert at.method == calibration.COARSE_METHOD  # the coarse release, up to twice the floor
    assert len(at.noisy_counts) == len(calibration.COARSE_EDGES) + 1


def test_the_warnings_name_each_part_below_its_floor() -> None:
    noise = 3.73
    withheld = calibration.withheld(40, noise)
    release = {"noise_std": noise * math.sqrt(3), "bins": list(np.linspace(0, 1, 19))}
    warnings = held_out_warnings(calibration=withheld, metrics={"release": release},
                                 evaluation_rows=45, epsilon=1.0)
    calibration_floor = calibration.size_floor_rows(noise)
    evaluation_floor = size_floor.evaluation_floor(noise_std=noise * math.sqrt(3), bins=18)
    assert [(w["release"], w["rows"], w["minimum_rows"], w["released"]) for w in warnings] == [
        ("calibration", 40, calibration_floor, False), ("evaluation", 45, evaluation_floor, True)]
    assert all(results.HeldOutWarning.model_validate(w).model_dump() == w for w in warnings)
    assert "not calibrated on held-out data" in warnings[0]["message"]
    assert f"40 rows are below the {calibration_floor}" in warnings[0]["message"]
    assert "at epsilon 1" in warnings[0]["message"]
    assert held_out_warnings(calibration=withheld, metrics={"release": release},
                             evaluation_rows=evaluation_floor, epsilon=1.0)[1:] == []


def _model(model_id: int, metrics: dict[str, Any], epsilon: float | None = 1.0) -> TrainedModel:
    return TrainedModel(id=model_id, artifact_sha256=f"{model_id:064x}", epsilon=epsilon,
                        delta=DELTA, accountant="prv", metrics=metrics)


def test_the_statement_says_what_was_not_released_and_never_calibrated_when_not() -> None:
    noise = 3.73
    release = {"noise_std": noise * math.sqrt(2), "bins": list(np.linspace(0, 1, 21))}
    calibrated = calibration.Calibration(
        method=calibration.METHOD, rows=300, noise_multiplier=noise, slope=1.0, intercept=-0.5,
        bin_edges_logit=[0.0], noisy_counts=[1.0], noisy_positives=[0.0])
    cases = [(calibration.withheld(40, noise), 45), (calibrated, 45), (calibrated, 400)]
    for model_id, (record, rows) in enumerate(cases, start=9001):
        metrics = {"release": release, "calibration": record.as_dict(),
                   "held_out_warnings": held_out_warnings(
                       calibration=record, metrics={"release": release},
                       evaluation_rows=rows, epsilon=1.0)}
        model = _model(model_id, metrics)
        sentence = registry_service.privacy_sentence(model)
        withheld = record.method == size_floor.CALIBRATION_WITHHELD
        assert registry_service.privacy_statement(model).calibrated is not withheld
        assert ("calibrated on a held-out part" in sentence) is not withheld, sentence
        assert ("not calibrated on held-out data" in sentence) is withheld, sentence
        assert ("Warning:" in sentence) is (rows < 100), sentence
        assert held_out_words.calibration_withheld(metrics) is withheld
        assert len(held_out_words.card_warnings(metrics)) == withheld + (rows < 100)
