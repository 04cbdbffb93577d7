"""Repeat-and-select accounting (app.privacy.selection): the figures against dp-accounting's
own ``RdpAccountant``, the noise search, the draws of the number of runs, and M, the runs
executed whatever K, with the tail P(K > M) that delta covers."""

import math

import numpy as np
import pytest
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import _truncated_negative_binomial_mean
from scipy.stats import logser, nbinom
from scipy.stats import poisson as poisson_law

from app.privacy import accounting, events, selection
from app.privacy.filter import rdp_at

SHAPES = [math.inf, 0.0, 0.5, 1.0, 3.0]


def _theirs(event: RepeatAndSelectDpEvent) -> RdpAccountant:
    theirs = RdpAccountant()  # its default orders: an independent computation
    theirs.compose(event)
    return theirs


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("sigma", "q", "steps"), [(1.1, 0.05, 300), (25.0, 1.0, 1000)])
def test_epsilon_and_filter_rdp_equal_dp_accountings_and_never_below(
    shape: float, sigma: float, q: float, steps: int
) -> None:
    event = selection.search_event(events.dpsgd(sigma, q, steps), 3.0, shape)
    theirs = _theirs(event)
    ours = accounting.epsilon_by_accountant([event], 1e-5)
    expected = theirs.get_epsilon((1 - accounting.SELECTION_TAIL_SHARE) * 1e-5)  # tail: the rest
    for figure in ours.values():  # PLD has no repeat-and-select: the headline is RDP
        assert figure == pytest.approx(expected, rel=1e-9)
        assert figure >= expected * (1 - 1e-12)
    for order in (2.0, 3.4, 3.9, 8.0, 32.0):
        at = list(theirs._orders).index(order)  # noqa: SLF001
        assert rdp_at([event], order) == pytest.approx(theirs._rdp[at], rel=1e-12)  # noqa: SLF001


def test_the_filter_order_figure_is_the_whole_grids_not_a_looser_one_order_figure() -> None:
    """The bound at one order minimises over an auxiliary order: computed from that order
    alone it is valid but looser; the ledger reads it off the whole grid."""
    event = selection.search_event(events.dpsgd(1.1, 0.05, 300), 3.0, 1.0)
    alone = RdpAccountant(orders=[3.9])
    alone.compose(event)
    assert rdp_at([event], 3.9) < alone._rdp[0]  # noqa: SLF001


def test_a_search_costs_more_than_one_run_and_grows_with_the_mean() -> None:
    run = events.dpsgd(2.0, 0.1, 200)
    one = accounting.RDPAccountant().epsilon([run], 1e-5)
    costs = [selection.search_epsilon(selection.search_event(run, mean, 1.0), 1e-5)
             for mean in (1.0, 3.0, 10.0)]
    assert one < costs[0] < costs[1] < costs[2]


def test_stored_events_keep_an_infinite_shape() -> None:
    event = selection.search_event(events.dpsgd(1.5, 0.2, 40), 2.0, math.inf)
    stored = events.to_json(event)
    assert stored["shape"] == events.INFINITY
    assert events.from_json(stored) == event
    assert '"shape":"inf"' in events.canonical(event)
    said = events.describe(event)
    assert (said.mechanism, said.noise_multiplier, said.sample_rate, said.steps) == (
        events.REPEAT_AND_SELECT, 1.5, 0.2, 1)  # one indivisible release


def test_an_order_without_a_finite_bound_drops_out_of_the_conversion() -> None:
    curve = np.array([math.inf, *([0.5] * (len(accounting.ORDERS) - 1))])
    finite = accounting.rdp_to_epsilon(curve, 1e-5)
    assert math.isfinite(finite)
    assert finite == accounting.rdp_to_epsilon(curve[1:], 1e-5, orders=accounting.ORDERS[1:])
    assert accounting.rdp_to_epsilon(np.full(len(accounting.ORDERS), math.inf), 1e-5) == math.inf


@pytest.mark.slow  # seconds of draws or noise searches: the full suite runs it
@pytest.mark.parametrize("shape", [math.inf, 1.0])
def test_the_noise_search_meets_the_target_and_no_less_noise_does(shape: float) -> None:
    def run_of(sigma: float) -> events.DpEvent:
        return events.dpsgd(sigma, 0.05, 400)

    sigma = selection.noise_for_search(target_epsilon=2.0, delta=1e-5, run_of=run_of, mean=3.0,
                                       shape=shape)
    total = selection.search_epsilon(selection.search_event(run_of(sigma), 3.0, shape), 1e-5)
    assert total <= 2.0
    less = selection.search_epsilon(selection.search_event(run_of(sigma * 0.97), 3.0, shape),
                                    1e-5)
    assert less > 2.0


def test_an_unreachable_target_is_refused() -> None:
    with pytest.raises(selection.SearchUnreachable):
        selection.noise_for_search(target_epsilon=0.05, delta=1e-5,
                                   run_of=lambda s: events.dpsgd(s, 1.0, 1000), mean=5.0,
                                   shape=1.0)


@pytest.mark.slow  # seconds of draws or noise searches: the full suite runs it
@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 3.0])
def test_truncated_negative_binomial_draws_are_at_least_one_with_the_declared_mean(
    shape: float,
) -> None:
    rng = np.random.default_rng(7)
    draws = np.array([selection.draw_runs("truncated_negative_binomial", 3.0, shape, rng)
                      for _ in range(20000)])
    assert draws.min() >= 1
    assert draws.mean() == pytest.approx(3.0, rel=0.05)
    gamma = selection.sampling_gamma(shape, 3.0)
    assert _truncated_negative_binomial_mean(gamma, shape) <= 3.0  # the charge covers the draw


def test_poisson_draws_can_be_zero() -> None:
    rng = np.random.default_rng(8)
    draws = np.array([selection.draw_runs("poisson", 1.0, math.inf, rng) for _ in range(5000)])
    assert (draws == 0).mean() == pytest.approx(math.exp(-1.0), abs=0.03)
    assert draws.mean() == pytest.approx(1.0, rel=0.06)


def test_the_smallest_fitting_noise_fits_and_a_little_less_does_not() -> None:
    event = selection.search_event(events.dpsgd(5.0, 0.1, 100), 2.0, 1.0)
    bound = 1.0

    def fits(candidate: events.DpEvent) -> bool:
        return rdp_at([candidate], 3.9) <= bound

    sigma = selection.smallest_fitting_noise(event, fits)
    assert sigma is not None
    assert fits(selection.with_run_noise(event, sigma))
    assert not fits(selection.with_run_noise(event, sigma * 0.99))


TNB = "truncated_negative_binomial"
LAWS = [("poisson", 1.0, math.inf), ("poisson", 3.0, math.inf), (TNB, 3.0, 0.0),
        (TNB, 3.0, 0.5), (TNB, 3.0, 1.0), (TNB, 2.0, 3.0)]


def _law_tail(runs: str, mean: float, shape: float, m: np.ndarray) -> np.ndarray:
    """P(K > m) by scipy's laws, independently of ``selection``'s sums (the truncated negative
    binomial: the negative binomial, or for eta = 0 the logarithmic, conditioned on K >= 1)."""
    if runs == "poisson":
        return np.asarray(poisson_law.sf(m, mean))
    gamma = selection.sampling_gamma(shape, mean)
    if shape == 0.0:
        return np.asarray(logser.sf(m, 1.0 - gamma))
    return np.asarray(nbinom.sf(m, shape, gamma) / (1.0 - gamma**shape))


@pytest.mark.parametrize(("runs", "mean", "shape"), LAWS)
def test_the_tail_matches_the_laws_sums_down_to_far_below_delta(
    runs: str, mean: float, shape: float,
) -> None:
    tails = selection.tail_probabilities(runs, mean, shape, selection.MAX_EXECUTED_RUNS)
    m = np.arange(len(tails))
    assert tails[0] == pytest.approx(1.0 - (math.exp(-mean) if runs == "poisson" else 0.0))
    assert np.all(np.diff(tails) <= 0)
    theirs = _law_tail(runs, mean, shape, m)
    exact = theirs > 1e-13  # logser.sf is 1 - cdf: below that it is rounding
    assert np.allclose(tails[exact], theirs[exact], rtol=1e-6, atol=0)
    assert np.all(tails[~exact] < 1e-12)


@pytest.mark.parametrize(("runs", "mean", "shape"), [("poisson", 3.0, math.inf), (TNB, 3.0, 1.0)])
def test_the_tail_is_what_the_worker_draws(runs: str, mean: float, shape: float) -> None:
    rng = np.random.default_rng(11)
    draws = np.array([selection.draw_runs(runs, mean, shape, rng) for _ in range(20000)])
    tails = selection.tail_probabilities(runs, mean, shape, 8)
    for m in range(9):
        seen = float((draws > m).mean())
        spread = 4 * math.sqrt(tails[m] * (1 - tails[m]) / len(draws)) + 1e-4
        assert abs(seen - tails[m]) <= spread, (m, seen, tails[m])


@pytest.mark.parametrize(("runs", "mean", "shape"), LAWS)
@pytest.mark.parametrize("delta", [1e-5, 1e-8])
def test_m_is_the_smallest_count_whose_tail_fits_in_its_share_of_delta(
    runs: str, mean: float, shape: float, delta: float,
) -> None:
    event = selection.search_event(events.dpsgd(2.0, 0.05, 200), mean, shape)
    assert isinstance(event, RepeatAndSelectDpEvent)
    eps = selection.search_epsilon(event, delta)
    share = accounting.SELECTION_TAIL_SHARE * delta
    try:
        executed = selection.executed_runs(event, delta)
    except selection.TooManyRuns:  # a logarithmic number of runs at the smaller delta
        most = selection.tail_probabilities(runs, mean, shape, selection.MAX_EXECUTED_RUNS)[-1]
        assert selection.tail_delta(eps, most) > share
        return
    tails = selection.tail_probabilities(runs, mean, shape, executed.runs)
    assert executed.tail_probability == pytest.approx(tails[executed.runs], rel=1e-9)
    assert selection.tail_delta(eps, executed.tail_probability) <= share
    if executed.runs > 1:
        assert selection.tail_delta(eps, tails[executed.runs - 1]) > share
    # the stated (eps, delta): repeat-and-select's figure at the rest, plus the tail
    theirs = _theirs(event)
    rest = (1 - accounting.SELECTION_TAIL_SHARE) * delta
    assert eps == pytest.approx(theirs.get_epsilon(rest), rel=1e-9)
    assert rest + selection.tail_delta(eps, executed.tail_probability) <= delta


def test_only_a_search_leaves_part_of_delta_to_a_tail() -> None:
    run = events.dpsgd(2.0, 0.05, 200)
    search = selection.search_event(run, 3.0, 1.0)
    assert accounting.conversion_delta([run], 1e-5) == 1e-5
    assert accounting.conversion_delta([search], 1e-5) == pytest.approx(0.9e-5)
    curve = accounting.rdp_curve([search])
    assert accounting.RDPAccountant().epsilon([search], 1e-5) == accounting.rdp_to_epsilon(
        curve, 0.9e-5)


def test_a_mean_whose_tail_needs_more_runs_than_the_cap_is_refused_with_the_mean_that_fits(
) -> None:
    event = selection.search_event(events.dpsgd(2.0, 0.05, 200), 20.0, 0.0)
    assert isinstance(event, RepeatAndSelectDpEvent)
    with pytest.raises(selection.TooManyRuns) as refused:
        selection.executed_runs(event, 1e-5)
    largest = refused.value.largest_mean
    assert 1.0 <= largest < 20.0
    fitting = selection.search_event(events.dpsgd(2.0, 0.05, 200), largest, 0.0)
    assert isinstance(fitting, RepeatAndSelectDpEvent)
    assert selection.executed_runs(fitting, 1e-5).runs <= selection.MAX_EXECUTED_RUNS
    poisson = selection.search_event(events.dpsgd(2.0, 0.05, 200), 20.0, math.inf)
    assert isinstance(poisson, RepeatAndSelectDpEvent)
    assert selection.executed_runs(poisson, 1e-10).runs < selection.MAX_EXECUTED_RUNS
