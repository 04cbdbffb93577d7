"""Private selection: a hyper-parameter search charged as one repeat-and-select release.

Papernot and Steinke ("Hyperparameter Tuning with Renyi Differential Privacy", ICLR 2022):
run a DP mechanism a *random* number K of times, each run on a candidate drawn uniformly from a
public list, and release only the best run (its candidate, its output and its score). With K
Poisson (mean mu; K = 0 releases nothing) or truncated negative binomial (shape eta >= 0,
K >= 1; eta = 1 is geometric, eta = 0 logarithmic), the whole search is RDP with a bound only a
little above one run's (Theorems 2 and 6), dp-accounting's ``RepeatAndSelectDpEvent(run, mu,
shape)`` (shape infinity: Poisson). That bound holds for the best run *alone*: K, the other
runs' candidates and their scores are not released (a fixed, known K loses the bound), so the
worker keeps them to itself.

A run must be one mechanism whatever its candidate: each candidate's own event must equal the
run's (``same_runs``), so candidates vary what the DP-SGD noise does not see (model, optimizer,
learning rate, clip norm...), not the sampling plan. A uniform choice among mechanisms that
each meet the run's RDP meets it too (Rényi divergence is jointly quasi-convex).

Accounting: dp-accounting's ``RdpAccountant`` (``app.privacy.foreign``); its PLD accountant
has no repeat-and-select, so the headline epsilon of a search is its RDP figure (an upper
bound), and the Rényi filter reads its RDP at the filter's order off the whole-grid curve.

K must stay hidden from every observer, its timing included, so the worker cannot run K runs:
it always executes a public number M of them (``executed_runs``, fixed at planning from the
distribution, its mean and shape, the figure and delta) and keeps the best of the first
min(K, M); the rest are trained and discarded. That is the analysed search except when K > M,
whose probability, times (1 + e^eps), fits in ``accounting.SELECTION_TAIL_SHARE`` of delta: a
search's epsilon is converted at the rest of delta (``accounting.conversion_delta``), so its
stated (epsilon, delta) covers the tail.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from dp_accounting.dp_event import DpEvent, RepeatAndSelectDpEvent
from dp_accounting.rdp.rdp_privacy_accountant import (
    _gamma_truncated_negative_binomial,
    _truncated_negative_binomial_mean,
)
from scipy.special import gammaln
from scipy.stats import poisson

from app.privacy import events
from app.privacy.accounting import (
    MAX_NOISE_MULTIPLIER,
    MIN_NOISE_MULTIPLIER,
    SELECTION_TAIL_SHARE,
    RDPAccountant,
)
from app.privacy.noise import TargetUnreachable
from app.privacy.noise_bisection import smallest_allowed_noise

Runs = Literal["poisson", "truncated_negative_binomial"]
POISSON: Runs = "poisson"
TRUNCATED_NEGATIVE_BINOMIAL: Runs = "truncated_negative_binomial"
DEFAULT_SHAPE = 1.0
"""eta of a truncated negative binomial search when the request leaves it: the geometric
distribution (Papernot and Steinke's simplest case). Smaller eta charges less for the same mean
(the bound's (1 + eta) factor) but draws long searches more often."""
RELATIVE_TOLERANCE = 0.003
MAX_EXECUTED_RUNS = 100
"""The most runs a search may execute: five times the largest mean a request may declare, so a
Poisson search of any mean fits up to epsilon 60 at delta 1e-10; a heavy-tailed one (small
eta, large mean) may not, and is refused."""


class SearchUnreachable(TargetUnreachable):
    """No noise multiplier within the allowed range brings the search to the target."""


def shape_of(runs: Runs, shape: float | None) -> float:
    """dp-accounting's shape: infinity for Poisson, else eta (default ``DEFAULT_SHAPE``)."""
    if runs == POISSON:
        return math.inf
    return DEFAULT_SHAPE if shape is None else float(shape)


def search_event(run: DpEvent, mean: float, shape: float) -> DpEvent:
    """The whole search: ``run`` repeated a random number of times, the best one released."""
    return RepeatAndSelectDpEvent(run, float(mean), float(shape))


def search_epsilon(event: DpEvent, delta: float) -> float:
    """The search's epsilon at ``delta``: RDP (dp-accounting's analysis; PLD has none),
    converted at ``delta`` less the tail's share (``accounting.conversion_delta``)."""
    return RDPAccountant().epsilon([event], delta)


def noise_for_search(*, target_epsilon: float, delta: float, run_of: Callable[[float], DpEvent],
                     mean: float, shape: float) -> float:
    """The smallest per-run noise multiplier (within 0.3% of the target in epsilon) at which
    the whole search's epsilon is at most ``target_epsilon``.

    A bisection on log sigma (the search's epsilon falls as sigma grows); the answer is always
    feasible: it is the upper end of the bracket, checked with the accountant.

    Args:
        run_of: one run's event at a given noise multiplier.

    Raises:
        SearchUnreachable: not even MAX_NOISE_MULTIPLIER reaches the target.
    """
    def eps(sigma: float) -> float:
        return search_epsilon(search_event(run_of(sigma), mean, shape), delta)

    if eps(MAX_NOISE_MULTIPLIER) > target_epsilon:
        raise SearchUnreachable(target_epsilon)
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    if eps(low) <= target_epsilon:
        return low
    eps_high = eps(high)
    for _ in range(40):
        if target_epsilon - eps_high <= RELATIVE_TOLERANCE * target_epsilon or high / low < 1.0005:
            break
        mid = math.sqrt(low * high)
        eps_mid = eps(mid)
        if eps_mid <= target_epsilon:
            high, eps_high = mid, eps_mid
        else:
            low = mid
    return high


def epochs_for_search(*, target_epsilon: float, delta: float, max_epochs: int,
                      run_at: Callable[[int], DpEvent], mean: float, shape: float) -> int | None:
    """The most epochs (at most ``max_epochs``) whose search reaches ``target_epsilon`` at the
    largest noise (``run_at(epochs)``: one run's event at MAX_NOISE_MULTIPLIER); None when not
    even one epoch does."""
    def reaches(epochs: int) -> bool:
        return search_epsilon(search_event(run_at(epochs), mean, shape), delta) <= target_epsilon

    if not reaches(1):
        return None
    low, high = 1, max_epochs
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if reaches(mid) else (low, mid - 1)
    return low


def sampling_gamma(shape: float, mean: float) -> float:
    """The truncated negative binomial's gamma the worker draws with: at least the accountant's
    (``_gamma_truncated_negative_binomial`` returns the low end of its bisection, whose mean
    may exceed ``mean`` by 1e-9), raised until the drawn mean is at most ``mean``. The bound's
    gamma term falls and its log(mean) term rises with the mean, so the charge covers the draw.
    """
    gamma = _gamma_truncated_negative_binomial(shape, mean)
    while gamma < 1.0 and _truncated_negative_binomial_mean(gamma, shape) > mean:
        gamma = min(1.0, gamma * (1.0 + 1e-9))
    return gamma


def draw_runs(runs: Runs, mean: float, shape: float, rng: np.random.Generator) -> int:
    """K, the number of runs: Poisson(mean) (0 possible) or truncated negative binomial
    (Papernot and Steinke's Definition 1: P[K = k] proportional to (1 - gamma)^k
    binom(k + eta - 1, k) for k >= 1; eta = 0: logarithmic)."""
    if runs == POISSON:
        return int(rng.poisson(mean))
    gamma = sampling_gamma(shape, mean)
    if gamma >= 1.0:
        return 1
    if shape == 0.0:
        return int(rng.logseries(1.0 - gamma))
    while True:  # the negative binomial conditioned on K >= 1, by rejection
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k


def with_run_noise(event: RepeatAndSelectDpEvent, noise_multiplier: float) -> DpEvent:
    """The same search with each run's DP-SGD at another noise multiplier.

    Raises:
        ValueError: the run is not DP-SGD (Poisson-subsampled Gaussian steps).
    """
    run = events.describe(event.event)
    if run.mechanism != events.SUBSAMPLED_GAUSSIAN or run.sample_rate is None or not run.steps:
        raise ValueError(f"a search over {run.mechanism} runs has no noise to search")
    return search_event(events.dpsgd(noise_multiplier, run.sample_rate, run.steps),
                        event.mean, event.shape)


def smallest_fitting_noise(event: RepeatAndSelectDpEvent,
                           fits: Callable[[DpEvent], bool]) -> float | None:
    """The smallest per-run noise (to 1e-4, rounded up) at which the search ``fits`` (a
    filter's test); None when not even MAX_NOISE_MULTIPLIER does."""
    return smallest_allowed_noise(lambda sigma: fits(with_run_noise(event, sigma)),
                                  geometric=True)


@dataclass(frozen=True)
class Executed:
    """The runs a search executes whatever K, and the probability that K exceeds them.

    Attributes:
        runs: M, public; the best of the first min(K, M) is kept.
        tail_probability: P(K > M), the only event on which the executed search differs from
            the analysed one.
    """

    runs: int
    tail_probability: float


class TooManyRuns(ValueError):
    """No M up to MAX_EXECUTED_RUNS makes the tail fit: the declared mean is too large.

    Attributes:
        largest_mean: the largest that fits, at least 1; None when not even 1 does (Poisson
            at an epsilon near the float range: (1 + e^eps) outgrows any tail).
    """

    def __init__(self, largest_mean: float | None) -> None:
        super().__init__(f"no mean above {largest_mean} fits {MAX_EXECUTED_RUNS} runs")
        self.largest_mean = largest_mean


def kind_of(shape: float) -> Runs:
    """The distribution a dp-accounting shape stands for (infinity: Poisson)."""
    return POISSON if math.isinf(shape) else TRUNCATED_NEGATIVE_BINOMIAL


def tail_delta(epsilon: float, tail_probability: float) -> float:
    """What K > M adds to delta: (1 + e^epsilon) P(K > M) (the coupling's price)."""
    return 0.0 if tail_probability <= 0.0 else _coupling(epsilon) * tail_probability


def _coupling(epsilon: float) -> float:
    """1 + e^epsilon, capped where e^epsilon leaves the float range."""
    return 1.0 + math.exp(min(epsilon, 700.0))


FILTER_TAIL_SHARE = 0.01
"""The share of a filter's delta one search's tail may take: a Rényi filter composing searches
converts at its delta less their summed tails (``app.ledger.spend.tailed``), so a hundred
searches on one dataset or patient would use all of it."""


def executed_runs(event: RepeatAndSelectDpEvent, delta: float,
                  filters: tuple[tuple[float, float], ...] = ()) -> Executed:
    """The smallest M >= 1 whose tail fits: tail_delta(eps, P(K > M)) at most
    SELECTION_TAIL_SHARE of ``delta``, eps the search's figure at ``delta``; and, for each
    filter (epsilon_F, delta_F) that will compose it, tail_delta(epsilon_F, P(K > M)) at most
    FILTER_TAIL_SHARE of delta_F.

    Args:
        delta: the smallest delta the search is stated at (the job's, or its dataset budget's
            where smaller): at a larger delta eps is smaller and the share larger, so it fits.
        filters: the budgets whose filters charge the search (its dataset's, its patients').

    Raises:
        TooManyRuns: not even MAX_EXECUTED_RUNS does.
    """
    runs, mean, shape = kind_of(event.shape), float(event.mean), float(event.shape)
    room = min([SELECTION_TAIL_SHARE * delta / _coupling(search_epsilon(event, delta)),
                *(FILTER_TAIL_SHARE * d / _coupling(e) for e, d in filters)])
    tails = tail_probabilities(runs, mean, shape, MAX_EXECUTED_RUNS)
    fits = np.flatnonzero(tails[1:] <= room)
    if not len(fits):
        raise TooManyRuns(_largest_mean(runs, shape, mean, room))
    m = int(fits[0]) + 1
    return Executed(m, float(tails[m]))


def _largest_mean(runs: Runs, shape: float, mean: float, room: float) -> float | None:
    """The largest mean (to 0.01, rounded down) whose tail at MAX_EXECUTED_RUNS fits ``room``
    (the tail grows with the mean; 1 always fits a truncated negative binomial: K = 1)."""
    def fits(candidate: float) -> bool:
        return bool(tail_probabilities(runs, candidate, shape, MAX_EXECUTED_RUNS)[-1] <= room)

    low, high = 1.0, mean
    if not fits(low):
        return None
    while high - low > 0.005:
        mid = (low + high) / 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return math.floor(low * 100) / 100


def tail_probabilities(runs: Runs, mean: float, shape: float, most: int) -> np.ndarray:
    """P(K > m) for m = 0..``most``, K drawn as ``draw_runs`` draws it. Each is a sum of the
    terms past m, never 1 minus a sum: the tails that matter are far below float's 1e-16."""
    m = np.arange(most + 1)
    if runs == POISSON:
        return np.asarray(poisson.sf(m, mean), dtype=float)
    gamma = sampling_gamma(shape, mean)
    if gamma >= 1.0:  # K = 1 always
        return np.where(m == 0, 1.0, 0.0)
    terms = np.exp(_log_weights(np.arange(1, most + 1), gamma, shape) - _log_total(gamma, shape))
    after = np.append(np.cumsum(terms[::-1])[::-1], 0.0)  # the terms past m, up to ``most``
    return after + _beyond(most, gamma, shape)


def _log_weights(k: np.ndarray, gamma: float, shape: float) -> np.ndarray:
    """log of the truncated negative binomial's unnormalised P[K = k], k >= 1:
    (1 - gamma)^k binom(k + eta - 1, k); for eta = 0 its limit's (1 - gamma)^k / k."""
    if shape == 0.0:
        return np.asarray(k * math.log1p(-gamma) - np.log(k), dtype=float)
    return np.asarray(k * math.log1p(-gamma) + gammaln(k + shape) - gammaln(shape)
                      - gammaln(k + 1), dtype=float)


def _log_total(gamma: float, shape: float) -> float:
    """log of the weights' sum over k >= 1: gamma^-eta - 1, or -log gamma for eta = 0."""
    if shape == 0.0:
        return math.log(-math.log(gamma))
    return math.log(math.expm1(-shape * math.log(gamma)))


def _beyond(most: int, gamma: float, shape: float) -> float:
    """P(K > ``most``): the terms summed in blocks until a geometric bound on the rest (the
    ratio of successive terms tends to 1 - gamma, from above when eta > 1) is below 1e-9 of
    the sum; the bound is added, so the figure is never below the true tail."""
    total, start, block = 0.0, most + 1, 4096
    while True:
        k = np.arange(start, start + block)
        terms = np.exp(_log_weights(k, gamma, shape) - _log_total(gamma, shape))
        total += float(terms.sum())
        ratio = max(float(terms[-1] / terms[-2]) if terms[-2] > 0 else 0.0, 1.0 - gamma)
        if ratio < 1.0:  # past the mode: the terms fall at least geometrically
            rest = float(terms[-1]) * ratio / (1.0 - ratio)
            if rest <= 1e-9 * total or terms[-1] == 0.0:
                return total + rest
        start += block
