"""Secure aggregation: Flower's SecAgg+ between the coordinator's server and the sites' clients
(the product's own glue, real gRPC on loopback, in one process): the coordinator's global model
moves by the weighted mean of the updates of the sites whose signed answers it took, a site
whose answers are not signed by its declared key takes no part, and a site that requires
secure aggregation refuses a plain round before it charges anything."""

import threading
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import ServerConfig, start_server
from flwr.server.workflow import SecAggPlusWorkflow

from app.federation import signing
from app.federation.models import Federation
from bench.clinics import address
from tests.federated.plans import mechanism, part
from worker import federated_site, secure_aggregation
from worker.federated_coordinator import FederationAverage, Report
from worker.federated_site import RoundRefused, SiteRun
from worker.federated_watch import Contact
from worker.secure_aggregation import (
    UPDATE_RANGE,
    WEIGHT_SCALE,
    SecureServer,
    threshold,
)

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

SHAPES = [(3,), (2, 2)]
STEPS = {"a": 1.0, "b": 5.0, "c": 100.0}  # what each site's round adds to every weight


class _Site:
    """A site's run as ``site_client`` and ``SiteRun.secure_answer`` read it, whose round adds
    its constant to every weight (the real code signs and answers each stage)."""

    secure_answer = SiteRun.secure_answer
    signed = SiteRun.signed

    def __init__(self, site: str, key: Ed25519PrivateKey, secure: bool = True,
                 declared: dict[str, str] | None = None) -> None:
        self.site, self.key, self.stages = site, key, None
        self.contact = Contact()
        self.part = part(site, secure_aggregation=secure, min_sites=2,
                         site_keys=dict(declared or {}))
        self.drops = self.lies = False  # killed in its round; a mechanism off the plan
        self.rounds_run = 0

    def weights(self) -> list[np.ndarray]:
        return [np.zeros(shape, np.float32) for shape in SHAPES]

    def run_round(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if self.site == "c" and self.drops:
            raise RuntimeError("killed after sharing its keys, before its masked vector")
        self.rounds_run += 1
        return [a + STEPS[self.site] for a in arrays]

    def figures(self) -> dict[str, Any]:
        if self.lies:  # less noise than the plan: its epsilon is over the target
            return {**mechanism(rounds=2), "noise_multiplier": 0.1}
        return mechanism(rounds=2)


def _federation(keys: dict[str, Ed25519PrivateKey], where: str) -> Federation:
    sites = [{"name": name, "weight": weight, "public_key": signing.public_of(keys[name])}
             for name, weight in (("a", 3.0), ("b", 1.0), ("c", 1.0))]
    return Federation(id=1, name="net", role="coordinator", address=where,
                      schema_sha256="0" * 64, sites=sites,
                      recipe={"target_epsilon": 3, "rounds": 2, "tail_average": 0.0,
                              "min_sites": 2, "secure_aggregation": True,
                              "round_timeout_seconds": 30})


def _federate(monkeypatch: pytest.MonkeyPatch, dropped: str, rounds: int = 2
              ) -> tuple[FederationAverage, SecureServer, list[_Site]]:
    """Run ``rounds`` secure rounds of sites a, b and c (c ``dropped`` as the test says)."""
    monkeypatch.setattr(Report, "write", lambda self, state: None)
    keys = {name: Ed25519PrivateKey.generate() for name in STEPS}
    where = address()
    federation = _federation(keys, where)
    strategy = FederationAverage(federation, Report(database=None, federation=federation))  # type: ignore[arg-type]
    # the final evaluation is the plain path's (tested with the real clinics)
    monkeypatch.setattr(strategy, "configure_evaluate", lambda *args, **kwargs: [])
    strategy.initial_parameters = ndarrays_to_parameters(_Site("a", keys["a"]).weights())
    declared = {name: signing.public_of(key) for name, key in keys.items()}
    sites = [_Site("a", keys["a"], declared=declared), _Site("b", keys["b"], declared=declared),
             _Site("c", Ed25519PrivateKey.generate() if dropped == "forger" else keys["c"],
                   declared=declared)]
    sites[2].drops = dropped == "killed"
    sites[2].lies = dropped == "liar"
    threads = [threading.Thread(target=federated_site.connect, args=(where, site), daemon=True)
               for site in sites]
    for thread in threads:
        thread.start()
    server = SecureServer(strategy, 2, 30.0)
    history = start_server(server_address=where, server=server,
                           config=ServerConfig(num_rounds=rounds, round_timeout=30))
    for thread in threads:
        thread.join(timeout=30)
    assert history is not None
    return strategy, server, sites


@pytest.mark.parametrize("dropped", ["forger", "killed", "liar", "none"])
def test_the_global_model_moves_by_the_weighted_mean_of_the_signed_sites_updates(
        monkeypatch: pytest.MonkeyPatch, dropped: str) -> None:
    """Site c takes no part: it answers with a key it did not declare (refused at the setup
    stage), or it dies in its round after sharing its keys (its masks rebuilt from a and b's
    shares), or its masked vector declares a mechanism off the plan (dropped by the coordinator,
    its masks rebuilt); either way the sum is a and b's, unmasked. Or it takes part, its
    update of 100 clipped to secure aggregation's range (16)."""
    strategy, server, sites = _federate(monkeypatch, dropped)
    rounds = strategy.report.rounds
    final = parameters_to_ndarrays(server.parameters)
    if dropped == "none":  # 2 rounds of (3 x 1 + 1 x 5 + 1 x 16) / 5
        assert [r["sites"] for r in rounds] == [["a", "b", "c"]] * 2
        assert sites[2].stages is not None and sites[2].stages.clipped == 2 * 7
        assert all(site.stages is not None and site.stages.rounds == 2 for site in sites)
        for layer in final:
            np.testing.assert_allclose(layer, 2 * 24 / 5, atol=1e-4)
        return
    assert [r["sites"] for r in rounds] == [["a", "b"], ["a", "b"]]
    assert [r["refused"] for r in rounds] == ([["c"], ["c"]] if dropped == "forger" else
                                              [[], []])
    for layer, shape in zip(final, SHAPES, strict=True):  # 2 rounds of (3 x 1 + 1 x 5) / 4
        assert layer.shape == shape
        np.testing.assert_allclose(layer, 4.0, atol=1e-4)  # SecAgg+'s quantisation
    assert [r["failures"] for r in rounds] == ([1, 1] if dropped == "liar" else [0, 0])
    assert sites[2].rounds_run == (2 if dropped == "liar" else 0)  # refused, or died


def test_a_site_that_requires_secure_aggregation_refuses_a_plain_round() -> None:
    site = _Site("a", Ed25519PrivateKey.generate())
    with pytest.raises(RoundRefused, match="requires secure aggregation"):
        federated_site.site_client(site).fit(site.weights(), {"server_round": 1})
    assert site.rounds_run == 0
    plain = _Site("b", Ed25519PrivateKey.generate(), secure=False)
    weights, _, metrics = federated_site.site_client(plain).fit(plain.weights(),
                                                                {"server_round": 1})
    assert plain.rounds_run == 1 and metrics["site"] == "b"
    np.testing.assert_allclose(weights[0], 5.0)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # a, b refuse
def test_flowers_own_secagg_plus_still_needs_the_mend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's workflow unmended, site c refused at the setup stage: Flower still counts c as
    dropped when unmasking, so a and b are asked for shares of a key c never shared, refuse
    (``RoundChecks``) and the round is halted with no sites. When this test fails, Flower has
    fixed it: drop ``MendedSecAggPlus`` (``worker.secure_aggregation``)."""

    def unmended(min_sites: int, declared: int, timeout: float) -> SecAggPlusWorkflow:
        return SecAggPlusWorkflow(
            num_shares=1.0, reconstruction_threshold=threshold(min_sites, declared),
            clipping_range=UPDATE_RANGE, max_weight=float(WEIGHT_SCALE), timeout=timeout)

    monkeypatch.setattr(secure_aggregation, "workflow", unmended)
    strategy, server, _ = _federate(monkeypatch, "forger", rounds=1)
    assert [r["sites"] for r in strategy.report.rounds] == [[]]
    assert [r["refused"] for r in strategy.report.rounds] == [["c"]]
    for layer in parameters_to_ndarrays(server.parameters):  # the global model did not move
        np.testing.assert_array_equal(layer, 0.0)
