"""The coordinator's FedAvg: the federation's public weights, a refused stranger, the quorum,
the released model as the mean of the tail rounds' global models, and (sites with keys) only
answers signed by the site they name, over the round's fresh nonce."""

from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager

from app.federation import signing
from app.federation.models import Federation
from tests.federated.plans import mechanism, part
from worker.federated_coordinator import FederationAverage, Report
from worker.federated_site import SiteRun

MODEL = [np.zeros(2), np.zeros(1)]  # the global model's shapes, as a round sends it


def _federation(rounds: int, tail: float, min_sites: int = 2) -> Federation:
    return Federation(id=1, name="net", role="coordinator", address="127.0.0.1:1",
                      schema_sha256="0" * 64, sites=[{"name": "a", "weight": 3.0},
                                                     {"name": "b", "weight": 1.0}],
                      recipe={"target_epsilon": 3, "rounds": rounds, "tail_average": tail,
                              "min_sites": min_sites})


def _strategy(monkeypatch: pytest.MonkeyPatch, **recipe: Any) -> FederationAverage:
    monkeypatch.setattr(Report, "write", lambda self, state: None)
    federation = _federation(**recipe)
    strategy = FederationAverage(federation, Report(database=None, federation=federation))  # type: ignore[arg-type]
    strategy.round_model = MODEL
    return strategy


def _fit(site: str, value: float) -> tuple[Any, FitRes]:
    weights = ndarrays_to_parameters([np.full(2, value), np.full(1, value)])
    return None, FitRes(Status(Code.OK, ""), weights, 1,
                        {"site": site, **mechanism(rounds=4)})


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


class _Site:
    """What ``SiteRun.signed`` reads of a clinic's run: its part, name and key."""

    def __init__(self, site: str, key: Any) -> None:
        self.part, self.site, self.key = part(site), site, key

    def answer(self, arrays: list[np.ndarray], config: dict[str, Any]) -> tuple[Any, FitRes]:
        figures = mechanism(rounds=4)
        metrics = SiteRun.signed(self, figures, kind=signing.FIT,  # type: ignore[arg-type]
                                 config=config, payload_sha256=signing.arrays_sha256(arrays))
        return None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1, metrics)


def _keyed(monkeypatch: pytest.MonkeyPatch) -> tuple[FederationAverage, dict[str, Any]]:
    monkeypatch.setattr(Report, "write", lambda self, state: None)
    keys = {name: Ed25519PrivateKey.generate() for name in ("a", "b")}
    federation = _federation(rounds=4, tail=0.0)
    federation.sites = [{**site, "public_key": signing.public_of(keys[site["name"]])}
                        for site in federation.sites]
    strategy = FederationAverage(federation, Report(database=None, federation=federation))  # type: ignore[arg-type]
    strategy.round_model = MODEL
    return strategy, keys


def test_a_keyed_federation_averages_only_answers_signed_by_the_named_site(
        monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, keys = _keyed(monkeypatch)
    first = strategy.round_config(1)
    a, b = _Site("a", keys["a"]), _Site("b", keys["b"])
    ones, fives = [np.full(2, 1.0), np.full(1, 1.0)], [np.full(2, 5.0), np.full(1, 5.0)]
    forged = _Site("b", keys["a"]).answer(fives, first)  # b's name, a's key
    unsigned = _Site("a", None).answer(ones, first)
    tampered = b.answer(fives, first)
    tampered[1].parameters = ndarrays_to_parameters([np.full(2, 99.0), np.full(1, 99.0)])
    merged, _ = strategy.aggregate_fit(1, [a.answer(ones, first), a.answer(ones, first), forged,
                                           unsigned, tampered, b.answer(fives, first)], [])
    assert merged is not None
    np.testing.assert_allclose(parameters_to_ndarrays(merged)[0], [2.0, 2.0])
    assert strategy.report.rounds[0]["sites"] == ["a", "b"]
    assert strategy.report.rounds[0]["refused"] == ["a", "a", "b", "b"]  # twice, forged, ...
    replayed = a.answer(ones, first)  # round 1's nonce, sent again in round 2
    second = strategy.round_config(2)
    assert second["nonce"] != first["nonce"]
    kept, _ = strategy.aggregate_fit(2, [replayed, b.answer(fives, second)], [])
    assert kept is None  # a's replay refused: below the quorum of two
    assert strategy.report.rounds[1]["refused"] == ["a"]


def test_a_site_without_keys_declared_signs_nothing() -> None:
    metrics = SiteRun.signed(_Site("a", None), {"steps": 1},  # type: ignore[arg-type]
                             kind=signing.FIT, config={}, payload_sha256="")
    assert metrics == {"steps": 1, "site": "a"}
