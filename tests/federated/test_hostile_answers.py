"""A site's malformed or lying answer is dropped from its round (counted as a failure), the
round goes on with the sites that remain, and the federation's epsilon is the coordinator's
own figure of its declared plan, never a site's claim."""

import json
from typing import Any

import numpy as np
import pytest
from flwr.common import (
    Code,
    EvaluateRes,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from app.federation.models import Federation
from tests.federated.plans import mechanism
from worker.evaluation import evaluate
from worker.federated_coordinator import FederationAverage, Report

ROUNDS, TARGET = 3, 3.0
MODEL = [np.zeros((3, 2)), np.zeros(3)]
THRESHOLDS = {"low_medium": 0.1, "medium_high": 0.3}


def _strategy(monkeypatch: pytest.MonkeyPatch) -> FederationAverage:
    monkeypatch.setattr(Report, "write", lambda self, state: None)
    federation = Federation(
        id=1, name="net", role="coordinator", address="127.0.0.1:1", schema_sha256="0" * 64,
        sites=[{"name": name, "weight": 1.0} for name in ("a", "b", "c")],
        recipe={"target_epsilon": TARGET, "rounds": ROUNDS, "tail_average": 0.0,
                "min_sites": 2, "delta": 1e-6})
    strategy = FederationAverage(federation, Report(database=None, federation=federation))  # type: ignore[arg-type]
    strategy.round_model = MODEL
    return strategy


def _fit(site: str, arrays: list[np.ndarray], **figures: Any) -> tuple[Any, FitRes]:
    metrics = {"site": site, **mechanism(rounds=ROUNDS, target=TARGET), **figures}
    metrics = {k: v for k, v in metrics.items() if v is not None}
    return None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1, metrics)


def _ones(value: float) -> list[np.ndarray]:
    return [np.full(m.shape, value) for m in MODEL]


@pytest.mark.parametrize("lie", [
    {"noise_multiplier": None, "epsilon": 0.0},  # no mechanism, a self-reported epsilon of 0
    {"noise_multiplier": "lots"},
    {"noise_multiplier": 0.5},  # less noise than the target needs
    {"planned_steps": 1},  # fewer steps than the plan
    {"sample_rate": 0.01},  # a batch the recipe (full batch) cannot give
    {"delta": 1e-3},  # not the declared delta
    {"shapes": [np.ones((7, 7))]},
    {"shapes": [np.ones((3, 2)), np.full(3, np.nan)]},
])
def test_a_lying_or_malformed_answer_is_dropped_and_the_round_goes_on(
        monkeypatch: pytest.MonkeyPatch, lie: dict[str, Any]) -> None:
    strategy = _strategy(monkeypatch)
    arrays = lie.pop("shapes", _ones(100.0))
    merged, _ = strategy.aggregate_fit(1, [_fit("a", _ones(1.0)), _fit("b", _ones(3.0)),
                                           _fit("c", arrays, **lie)], [])
    assert merged is not None
    for layer in parameters_to_ndarrays(merged):
        np.testing.assert_allclose(layer, 2.0)  # a and b only
    assert strategy.report.rounds[0]["sites"] == ["a", "b"]
    assert strategy.report.rounds[0]["failures"] == 1
    assert sorted(strategy.report.statements) == ["a", "b"]
    epsilon, delta = strategy.report.worst()
    assert (epsilon, delta) == (TARGET, 1e-6)  # the plan's, not any site's word
    for statement in strategy.report.statements.values():
        assert 0 < statement["epsilon"] <= TARGET * 1.001  # recomputed from the mechanism


def test_a_round_left_below_the_quorum_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = _strategy(monkeypatch)
    merged, _ = strategy.aggregate_fit(1, [_fit("a", _ones(1.0)),
                                           _fit("b", [np.ones((7, 7))], epsilon=0.0)], [])
    assert merged is None
    assert strategy.report.rounds[0] == {"round": 1, "sites": ["a"], "failures": 1,
                                         "refused": []}


def _evaluation(seed: int, **changes: Any) -> str:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 400)
    p = np.clip(0.3 * y + rng.uniform(0, 0.6, 400), 0, 1)
    answer = evaluate(y, p, groups={}, noise_multiplier=1.0, band_thresholds=THRESHOLDS,
                      rng=rng, n_bootstrap=0)
    found = {"release": answer["release"], "band_thresholds": answer["band_thresholds"]}
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = found
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return json.dumps(found)


@pytest.mark.parametrize("bad", [
    "not json", json.dumps({"release": {}}), None,
    {"release.noise_std": "loud"},
    {"release.bins": [0.0, 0.5, 1.0]},
    {"release.histograms.all.positives": [1.0, 2.0]},
    {"release.histograms.all.negatives": "many"},
    {"release.groupings": {"sex": ["f"]}},
    {"band_thresholds": {"low_medium": 0.2, "medium_high": 0.1}},
])
def test_a_bad_evaluation_is_dropped_and_the_others_summed(
        monkeypatch: pytest.MonkeyPatch, bad: Any) -> None:
    strategy = _strategy(monkeypatch)
    answer = _evaluation(3, **bad) if isinstance(bad, dict) else bad

    def res(site: str, evaluation: str | None) -> tuple[Any, EvaluateRes]:
        metrics = {"site": site} if evaluation is None else {"site": site,
                                                             "evaluation": evaluation}
        return None, EvaluateRes(Status(Code.OK, ""), 0.0, 1, metrics)

    strategy.aggregate_evaluate(ROUNDS, [res("a", _evaluation(1)), res("b", _evaluation(2)),
                                         res("c", answer)], [])
    assert strategy.report.evaluated_sites == ["a", "b"]
    assert strategy.report.evaluation is not None
    summed = strategy.report.evaluation["release"]["histograms"]["all"]
    one, two = (json.loads(_evaluation(s))["release"]["histograms"]["all"] for s in (1, 2))
    np.testing.assert_allclose(summed["positives"],
                               np.add(one["positives"], two["positives"]))
