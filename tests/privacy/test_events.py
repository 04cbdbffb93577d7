"""Releases as dp-accounting events: their stored form, and the one accountant interface that
composes any list of them (the project's kernels where it has them, dp-accounting elsewhere),
checked against dp-accounting's own accountants."""

import json
import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting import dp_event as E
from dp_accounting.rdp import RdpAccountant

from app.privacy import accounting, events
from app.privacy.accounting import Mechanism, PLDAccountant, RDPAccountant
from app.privacy.filter import rdp_at

ORDERS = list(accounting.RDP_ORDERS)
INTEGER = [i for i, a in enumerate(ORDERS) if float(a).is_integer()]
SAMPLES = [
    events.dpsgd(1.1, 0.01, 1000),
    events.dpsgd(0.0, 0.2, 15),
    events.one_shot("gaussian", [2.0, 3.0]),
    events.one_shot("laplace", [0.5]),
    E.RepeatAndSelectDpEvent(E.GaussianDpEvent(4.0), 3.0, 1.0),
    E.SingleEpochTreeAggregationDpEvent(2.0, [10, 20]),
    E.ZCDpEvent(0.1, 0.0),
    E.NoOpDpEvent(),
]


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_event_survives_its_stored_form_and_hashes_the_same(event: E.DpEvent) -> None:
    stored = json.loads(json.dumps(events.to_json(event)))
    assert events.from_json(stored) == event
    assert events.canonical(events.from_json(stored)) == events.canonical(event)


def test_the_stored_form_types_every_field() -> None:
    assert events.to_json(E.GaussianDpEvent(2)) == {"type": "GaussianDpEvent",
                                                     "noise_multiplier": 2.0}
    assert events.from_json({"type": "GaussianDpEvent", "noise_multiplier": 2}
                            ).noise_multiplier == 2.0


@pytest.mark.parametrize("stored", [
    {"type": "Protocol"}, {"type": "importlib"}, {"type": "NoSuchDpEvent"},
    {"type": "GaussianDpEvent"}, {"type": "GaussianDpEvent", "noise_multiplier": 1.0, "x": 1},
    {"noise_multiplier": 1.0}, [1.0], "GaussianDpEvent",
])
def test_only_events_of_dp_accounting_are_read_back(stored: object) -> None:
    with pytest.raises(ValueError):
        events.from_json(stored)


def test_the_first_steps_of_a_self_composition_are_a_shorter_one() -> None:
    event = events.dpsgd(1.1, 0.01, 1000)
    assert events.first_steps(event, 1000, 1000) is event
    assert events.first_steps(event, 0, 1000) == E.NoOpDpEvent()
    assert events.first_steps(event, 10, 1000) == events.dpsgd(1.1, 0.01, 10)
    with pytest.raises(ValueError):
        events.first_steps(events.one_shot("gaussian", [1.0]), 1, 2)
    with pytest.raises(ValueError):
        events.first_steps(event, 10, 999)


def _theirs(history: list[E.DpEvent], orders: list[float]) -> np.ndarray:
    accountant = RdpAccountant(orders=orders)
    accountant.compose(E.ComposedDpEvent(history))
    return accountant.rdp


@pytest.mark.parametrize("history", [
    [events.one_shot("gaussian", [2.0, 3.0, 0.7])],
    [events.one_shot("laplace", [0.5, 4.0])],
    [events.one_shot("laplace", [2.0]), events.one_shot("gaussian", [1.5])],
    [E.SelfComposedDpEvent(E.LaplaceDpEvent(3.0), 4)],
    [E.RepeatAndSelectDpEvent(E.GaussianDpEvent(4.0), 3.0, 1.0),
     events.one_shot("gaussian", [5.0])],
])
def test_one_shot_and_other_events_compose_as_dp_accounting(history: list[E.DpEvent]) -> None:
    whole = _theirs(history, ORDERS)
    np.testing.assert_allclose(accounting.rdp_curve(history), whole, rtol=1e-9, atol=1e-15)
    for order in (1.5, 11.0, 256.0):
        # At one order, the whole grid's figure (a repeat-and-select's bound at one order reads
        # the others), never above what that order alone gives (app.privacy.foreign).
        at = list(ORDERS).index(order)
        assert rdp_at(history, order) == pytest.approx(whole[at], rel=1e-9)
        assert rdp_at(history, order) <= _theirs(history, [order])[0] * (1 + 1e-9)


def test_dp_sgd_matches_dp_accounting_at_the_integer_orders() -> None:
    """At fractional orders dp-accounting bounds the subsampled Gaussian from above (several
    times higher near order 1); the ledger keeps Opacus' figures, and they agree where both are
    exact."""
    history = [events.dpsgd(1.1, 0.01, 1000), events.dpsgd(3.0, 0.2, 40)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _theirs(history, ORDERS)
    ours = accounting.rdp_curve(history)
    np.testing.assert_allclose(ours[INTEGER], theirs[INTEGER], rtol=1e-9)
    assert np.all(ours <= theirs * (1 + 1e-9))


def test_a_mechanism_is_its_dp_sgd_event() -> None:
    m = Mechanism(1.1, 0.01, 1000)
    for accountant in (RDPAccountant(), PLDAccountant()):
        assert accountant.epsilon([m.event], 1e-5) == accountant.epsilon([m], 1e-5)
    assert m.event == E.SelfComposedDpEvent(
        E.PoissonSampledDpEvent(0.01, E.GaussianDpEvent(1.1)), 1000)
    assert accounting.as_mechanism([m.event]) == m


def test_one_sample_released_many_times_is_not_dp_sgd() -> None:
    """``PoissonSampledDpEvent(q, SelfComposedDpEvent(GaussianDpEvent(s), T))`` samples once;
    it is composed as dp-accounting defines it, never as T sampled steps."""
    once = E.PoissonSampledDpEvent(0.01, E.SelfComposedDpEvent(E.GaussianDpEvent(1.1), 1000))
    assert accounting.as_mechanism([once]) is None
    np.testing.assert_allclose(accounting.rdp_curve([once]), _theirs([once], ORDERS))


@pytest.mark.parametrize("history", [
    [E.UnsupportedDpEvent()], [events.dpsgd(0.0, 0.3, 5)], [E.NonPrivateDpEvent()],
    [events.one_shot("gaussian", [1.0]), E.NonPrivateDpEvent()],
])
def test_what_no_accountant_bounds_is_charged_as_non_private(history: list[E.DpEvent]) -> None:
    assert math.isinf(rdp_at(history, 11.0))
    assert np.all(np.isinf(accounting.rdp_curve(history)))
    assert math.isinf(PLDAccountant().epsilon(history, 1e-5))


def test_nothing_run_spends_nothing() -> None:
    for history in ([], [E.NoOpDpEvent()], [events.dpsgd(1.0, 0.1, 0)]):
        assert rdp_at(history, 11.0) == 0.0
        assert PLDAccountant().epsilon(history, 1e-5) == 0.0
        assert accounting.pure_epsilon(history) == 0.0


def test_the_headline_of_a_gaussian_release_is_dp_accountings_pld() -> None:
    release = events.one_shot("gaussian", [2.0, 3.0])
    theirs = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    theirs.compose(release)
    ours = PLDAccountant().epsilon([release], 1e-5)
    assert ours == pytest.approx(theirs.get_epsilon(1e-5), rel=2e-3)


def test_a_laplace_release_is_pure_and_its_headline_never_above_it() -> None:
    release = events.one_shot("laplace", [2.0, 4.0])
    assert accounting.pure_epsilon([release]) == 0.75
    assert PLDAccountant().epsilon([release], 1e-5) <= 0.75
    assert math.isinf(accounting.pure_epsilon([events.one_shot("gaussian", [2.0])]))


def test_the_columns_of_the_ledger_describe_its_events() -> None:
    assert events.describe(events.dpsgd(1.1, 0.01, 10)) == events.Description(
        events.SUBSAMPLED_GAUSSIAN, 1.1, 0.01, 10)
    assert events.describe(events.dpsgd(0.0, 0.01, 10)).mechanism == events.NON_PRIVATE
    said = events.describe(events.one_shot("laplace", [2.0, 2.0]))
    assert (said.mechanism, said.noise_multiplier, said.components) == ("laplace", 1.0,
                                                                         [2.0, 2.0])
    assert events.describe(E.ZCDpEvent(0.1, 0.0)) == events.Description("ZCDpEvent")
