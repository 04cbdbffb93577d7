"""The coordinator's FedAvg: the federation's public weights, a refused stranger, the quorum,
and the released model as the mean of the tail rounds' global models."""

from typing import Any

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager

from app.federation.models import Federation
from worker.federated_coordinator import FederationAverage, Report


def _federation(rounds: int, tail: float, min_sites: int = 2) -> Federation:
    return Federation(id=1, name="net", role="coordinator", address="127.0.0.1:1",
                      schema_sha256="0" * 64, sites=[{"name": "a", "weight": 3.0},
                                                     {"name": "b", "weight": 1.0}],
                      recipe={"target_epsilon": 3, "rounds": rounds, "tail_average": tail,
                              "min_sites": min_sites})


def _strategy(monkeypatch: pytest.MonkeyPatch, **recipe: Any) -> FederationAverage:
    monkeypatch.setattr(Report, "write", lambda self, state: None)
    federation = _federation(**recipe)
    return FederationAverage(federation, Report(database=None, federation=federation))  # type: ignore[arg-type]


def _fit(site: str, value: float) -> tuple[Any, FitRes]:
    weights = ndarrays_to_parameters([np.full(2, value), np.full(1, value)])
    return None, FitRes(Status(Code.OK, ""), weights, 1,
                        {"site": site, "epsilon": 3.0, "delta": 1e-6})


def test_updates_are_averaged_with_the_declared_weights_and_strangers_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = _strategy(monkeypatch, rounds=4, tail=0.0)
    merged, _ = strategy.aggregate_fit(1, [_fit("a", 1.0), _fit("b", 5.0), _fit("eve", 99.0)],
                                       [])
    assert merged is not None
    np.testing.assert_allclose(parameters_to_ndarrays(merged)[0], [2.0, 2.0])  # (3*1 + 5) / 4
    assert strategy.report.rounds[0]["sites"] == ["a", "b"]
    assert strategy.report.rounds[0]["refused"] == ["eve"]
    alone, _ = strategy.aggregate_fit(2, [_fit("a", 1.0)], [RuntimeError()])
    assert alone is None  # below the quorum: the round changes nothing
    assert strategy.report.rounds[1]["failures"] == 1


def test_the_released_model_is_the_mean_of_the_tail_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = _strategy(monkeypatch, rounds=4, tail=0.5)  # rounds 3 and 4
    for server_round, value in enumerate([10.0, 20.0, 30.0, 50.0], start=1):
        strategy.aggregate_fit(server_round, [_fit("a", value), _fit("b", value)], [])
    assert strategy.mean is not None
    np.testing.assert_allclose(strategy.mean[0], [40.0, 40.0])
    last = ndarrays_to_parameters([np.full(2, 50.0), np.full(1, 50.0)])
    assert strategy.configure_evaluate(3, last, SimpleClientManager()) == []  # not the last
    untouched = _strategy(monkeypatch, rounds=4, tail=0.0)
    for server_round, value in enumerate([10.0, 20.0, 30.0, 50.0], start=1):
        untouched.aggregate_fit(server_round, [_fit("a", value), _fit("b", value)], [])
    np.testing.assert_allclose(untouched.mean[0] if untouched.mean else [], [50.0, 50.0])
