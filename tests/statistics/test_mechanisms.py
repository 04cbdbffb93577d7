"""Each registered noise mechanism's privacy map, against dp-accounting computed on its own.

For every mechanism in ``app.statistics.mechanisms`` and a grid of targets, shares and
sensitivities, the noise it calibrates is re-accounted independently, from the drawn noise's
scale and the vector's sensitivity alone (dp-accounting's privacy-loss distributions, not the
mechanism's own figures): the ledger's event must never charge less than that noise costs,
nor much more, and the epsilon the mechanism states must lie between dp-accounting's
optimistic and pessimistic bounds and within the requested target.
"""

import math

import pytest
from dp_accounting.dp_event import ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

from app.privacy import events
from app.privacy.mechanisms import GAUSSIAN, LAPLACE
from app.statistics import mechanisms
from app.statistics.noise import Noise, calibrated
from app.statistics.shapes import Vector

# What each mechanism's noise is, in dp-accounting's own terms (not the mechanism's).
TRUE_EVENT = {GAUSSIAN: GaussianDpEvent, LAPLACE: LaplaceDpEvent}
TARGETS = [(0.3, 1e-6), (1.0, 1e-5), (4.0, 1e-7)]
VECTORS = [(1.0, 0.5), (7.5, 0.25), (0.5, 0.25)]  # (sensitivity, share): shares add to 1
GRID = 2e-4  # the privacy-loss distributions' discretisation


def _loss(name: str, noise: Noise, optimistic: bool) -> pld.PrivacyLossDistribution:
    sensitivity = noise.vector.sensitivity
    if name == GAUSSIAN:
        return pld.from_gaussian_mechanism(noise.scale, sensitivity=sensitivity,
                                           pessimistic_estimate=not optimistic,
                                           value_discretization_interval=GRID)
    return pld.from_laplace_mechanism(noise.scale, sensitivity=sensitivity,
                                      pessimistic_estimate=not optimistic,
                                      value_discretization_interval=GRID)


def _release(name: str, epsilon: float, delta: float) -> list[Noise]:
    mechanism = mechanisms.of(name)
    calibration = mechanism.calibration(epsilon, delta)
    return [calibrated(mechanism, Vector("count", "counts", 3, s, share), calibration)
            for s, share in VECTORS]


def test_every_request_mechanism_is_registered_with_a_ledger_event() -> None:
    assert set(mechanisms.MECHANISMS) == set(TRUE_EVENT)
    assert mechanisms.names() == ("gaussian", "laplace")  # the API's order, kept
    for name, mechanism in mechanisms.MECHANISMS.items():
        assert mechanism.name == name and mechanism.charged_as in events.ONE_SHOT
        assert isinstance(mechanism.event(2.0), TRUE_EVENT[name])


@pytest.mark.parametrize("name", list(mechanisms.MECHANISMS))
@pytest.mark.parametrize(("epsilon", "delta"), TARGETS)
def test_the_ledger_event_never_charges_less_than_the_noise_costs(
        name: str, epsilon: float, delta: float) -> None:
    release = _release(name, epsilon, delta)
    for noise in release:
        true = noise.scale / noise.vector.sensitivity  # the noise's own multiplier
        charged = noise.event
        assert isinstance(charged, TRUE_EVENT[name])
        assert charged.noise_multiplier <= true * (1 + 1e-12)  # never under-reports
        assert charged.noise_multiplier == pytest.approx(true, rel=1e-6)  # and is tight
    at = delta if name == GAUSSIAN else 1e-6
    ledger = PLDAccountant().compose(ComposedDpEvent([n.event for n in release]))
    truth = PLDAccountant().compose(ComposedDpEvent(
        [TRUE_EVENT[name](n.scale / n.vector.sensitivity) for n in release]))
    assert ledger.get_epsilon(at) >= truth.get_epsilon(at) - 1e-9
    assert ledger.get_epsilon(at) == pytest.approx(truth.get_epsilon(at), rel=1e-3)


@pytest.mark.parametrize("name", list(mechanisms.MECHANISMS))
@pytest.mark.parametrize(("epsilon", "delta"), TARGETS)
def test_the_stated_epsilon_lies_within_dp_accountings_bounds_and_the_target(
        name: str, epsilon: float, delta: float) -> None:
    release = _release(name, epsilon, delta)
    mechanism = mechanisms.of(name)
    stated = mechanism.epsilon([n.privacy for n in release], delta)
    low, high = (_composed(name, release, optimistic) for optimistic in (True, False))
    assert low.get_epsilon_for_delta(delta) - 1e-9 <= stated  # never under-reports
    if name == GAUSSIAN:  # exact at delta: tight against the pessimistic bound
        assert stated <= high.get_epsilon_for_delta(delta) + 1e-9
    else:  # pure: each vector's epsilon is at least sensitivity / scale, in all the target
        pure = math.fsum(n.vector.sensitivity / n.scale for n in release)
        assert pure <= stated <= pure * (1 + 1e-6)
    assert stated <= epsilon * (1 + 1e-9)
    assert stated == pytest.approx(epsilon, rel=1e-6)


def _composed(name: str, release: list[Noise], optimistic: bool
              ) -> pld.PrivacyLossDistribution:
    loss = _loss(name, release[0], optimistic)
    for noise in release[1:]:
        loss = loss.compose(_loss(name, noise, optimistic))
    return loss
