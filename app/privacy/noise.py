"""Noise search: the smallest noise multiplier whose accounted epsilon meets a target."""

import math
from collections.abc import Callable

from app.privacy.accounting import (
    MAX_NOISE_MULTIPLIER,
    MIN_NOISE_MULTIPLIER,
    Accountant,
    Mechanism,
    create_accountant,
    integer_order_epsilon,
    search_accountant,
)

Epsilon = Callable[[float], float]
RELATIVE_TOLERANCE = 0.003  # at large targets, stop within 0.3% of the target


class TargetUnreachable(ValueError):
    """No noise multiplier within the allowed range reaches the target epsilon."""


def epochs_for_target(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps_per_epoch: int,
    max_epochs: int,
    accountant: str = "prv",
) -> int | None:
    """The most epochs (at most ``max_epochs``) whose steps reach ``target_epsilon`` at the
    largest allowed noise, MAX_NOISE_MULTIPLIER; None when not even one epoch does.

    Epsilon grows with the number of steps at a fixed noise and sample rate, so a bisection on
    the epochs finds the largest feasible count (about log2(max_epochs) evaluations; at q = 1
    each is the exact Gaussian, microseconds). The answer is checked with ``accountant``
    itself, so ``noise_for_target`` at the returned epochs finds a noise within the cap.

    Args:
        target_epsilon: the requested epsilon, > 0.
        delta: the job's delta.
        sample_rate: the Poisson sample rate q, in (0, 1].
        steps_per_epoch: steps of one epoch at that rate (1 at q = 1).
        max_epochs: the epochs planned before the target proved out of reach, >= 1.
    """
    acc = create_accountant(accountant)

    def reaches(epochs: int) -> bool:
        mechanism = Mechanism(MAX_NOISE_MULTIPLIER, sample_rate, epochs * steps_per_epoch)
        return acc.epsilon([mechanism], delta) <= target_epsilon

    if not reaches(1):
        return None
    low, high = 1, max_epochs  # reaches(low); the answer is in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if reaches(mid):
            low = mid
        else:
            high = mid - 1
    return low


def noise_for_target(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "prv",
    tolerance: float = 0.01,
    max_evaluations: int = 12,
) -> float:
    """Smallest noise multiplier (within ``tolerance`` in epsilon) whose epsilon <= target.

    The returned sigma always satisfies epsilon(sigma) <= target_epsilon for the named
    accountant: the answer is checked with it. The search solves the closed-form integer-order
    RDP first (microseconds; usually feasible and close), then, with ``search_accountant``
    (for ``prv`` the headline PLD with a quarter of the points: cheaper where its PMF is large,
    a little looser), raises that guess until feasible or narrows below it by bound-rescaled
    guesses and safeguarded regula falsi on log-log scale, to within ``tolerance`` or 0.3% of
    the target, whichever is larger. The result is checked with the accountant; where that
    check fails (rare: the cheaper figure is not always the looser) sigma is raised until it
    passes.

    The search is deterministic: it stops after ``max_evaluations`` evaluations of the search
    accountant (counted, never timed), so the same request gives the same sigma on any machine
    under any load; where the count runs out, the best feasible sigma found is returned (a
    little more noise than needed, never less). Each evaluation's cost is bounded by the
    accountant's point caps, so the count bounds the planning time too
    (``bench/planning_cost.py``).

    Raises:
        TargetUnreachable: the target needs more noise than MAX_NOISE_MULTIPLIER.
    """
    accountants = create_accountant(accountant), search_accountant(accountant)
    same = type(accountants[0]) is type(accountants[1]) and vars(accountants[0]) == vars(
        accountants[1]
    )
    budget = _Budget(max_evaluations)
    headline, cheap = (_epsilon_of(acc, delta, sample_rate, steps) for acc in accountants)

    def bound(sigma: float) -> float:
        return integer_order_epsilon([(sigma, sample_rate, steps)], delta)

    guess = MIN_NOISE_MULTIPLIER
    if bound(MIN_NOISE_MULTIPLIER) > target_epsilon:
        guess = _bisect(bound, target_epsilon)
    eps = budget.counted(cheap)
    found = _raised(eps, guess, target_epsilon)
    if found is None and same:
        raise TargetUnreachable(target_epsilon)
    high = MAX_NOISE_MULTIPLIER if found is None else found[0]
    if found is not None and high > MIN_NOISE_MULTIPLIER and budget.allows():
        slack = max(tolerance, RELATIVE_TOLERANCE * target_epsilon)
        high = _search(eps, bound, target_epsilon, found, slack, budget)
    return high if same else _checked(headline, high, target_epsilon)


def _raised(eps: Epsilon, sigma: float, target: float) -> tuple[float, float] | None:
    """(sigma, eps), sigma raised by 25% steps until eps(sigma) <= target; None past the
    largest noise.

    The closed-form guess is feasible for the PLD except where the PLD's 1e-4 discretisation
    is the looser bound (tiny per-step losses).
    """
    value = eps(sigma)
    while value > target:
        if sigma >= MAX_NOISE_MULTIPLIER:
            return None
        sigma = min(sigma * 1.25, MAX_NOISE_MULTIPLIER)
        value = eps(sigma)
    return sigma, value


def _checked(headline: Epsilon, sigma: float, target: float) -> float:
    """``sigma`` once the accountant itself confirms it, raised by 5% steps where it does not.

    Raises:
        TargetUnreachable: not even MAX_NOISE_MULTIPLIER meets the target.
    """
    while headline(sigma) > target:
        if sigma >= MAX_NOISE_MULTIPLIER:
            raise TargetUnreachable(target)
        sigma = min(sigma * 1.05, MAX_NOISE_MULTIPLIER)
    return sigma


class _Budget:
    """How many more evaluations the search may make: a count, not a clock, so the answer does
    not depend on the machine's speed or load."""

    def __init__(self, evaluations: int) -> None:
        self.left = evaluations

    def counted(self, eps: Epsilon) -> Epsilon:
        """``eps``, each call counted against the budget."""
        def counted(sigma: float) -> float:
            self.left -= 1
            return eps(sigma)

        return counted

    def allows(self) -> bool:
        return self.left > 0


def _epsilon_of(acc: Accountant, delta: float, sample_rate: float, steps: int) -> Epsilon:
    def eps(sigma: float) -> float:
        return acc.epsilon([Mechanism(sigma, sample_rate, steps)], delta)

    return eps


def _search(
    eps: Epsilon,
    bound: Epsilon,
    target: float,
    feasible: tuple[float, float],
    tolerance: float,
    budget: _Budget,
) -> float:
    """Smallest sigma found with eps(sigma) <= target within ``budget``, below a feasible one.

    Guesses downwards: first the closed-form bound rescaled by eps / bound at the feasible
    point (far better than fixed steps where the bound is loose, e.g. at tiny sample rates),
    then secants through the last two points on log-log scale; regula falsi once a guess
    overshoots.
    """
    points = [feasible]
    for _ in range(8):
        high, eps_high = points[-1]
        if target - eps_high <= tolerance or high == MIN_NOISE_MULTIPLIER or not budget.allows():
            return high
        low = _next_guess(points, bound, target)  # at most halving: the ratio may drift
        low = max(min(low, high / 1.001), high / 2, MIN_NOISE_MULTIPLIER)
        eps_low = eps(low)
        if eps_low > target:
            if not budget.allows():
                return high
            return _narrow(eps, target, (low, eps_low), (high, eps_high), tolerance, budget)
        points.append((low, eps_low))
    return points[-1][0]


def _next_guess(points: list[tuple[float, float]], bound: Epsilon, target: float) -> float:
    """Where eps should reach ``target``: the bound rescaled, or the log-log secant."""
    (s_2, e_2) = points[-1]
    if len(points) == 1:
        return _bisect(bound, target * bound(s_2) / max(e_2, 1e-300))
    (s_1, e_1) = points[-2]
    slope = (math.log(max(e_2, 1e-300)) - math.log(max(e_1, 1e-300))) / math.log(s_2 / s_1)
    if not slope < 0:
        return s_2 / 1.25
    return math.exp(math.log(s_2) + (math.log(target) - math.log(max(e_2, 1e-300))) / slope)


def _bisect(epsilon_of: Callable[[float], float], target: float) -> float:
    """Smallest sigma (to 0.1%) with epsilon_of(sigma) <= target (cheap functions)."""
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    while high / low > 1 + 1e-3:
        mid = math.sqrt(low * high)
        if epsilon_of(mid) <= target:
            high = mid
        else:
            low = mid
    return high


def _narrow(
    eps: Callable[[float], float],
    target: float,
    low: tuple[float, float],
    high: tuple[float, float],
    tolerance: float,
    budget: _Budget,
) -> float:
    """Illinois regula falsi on (log sigma, log eps) between an infeasible and a feasible sigma.

    Keeps the invariant eps(low) > target >= eps(high) and returns ``high``, at the latest when
    the budget allows no further evaluation.
    """
    (s_lo, e_lo), (s_hi, e_hi) = low, high
    log_t = math.log(target)
    f_lo, f_hi = math.log(e_lo) - log_t, math.log(max(e_hi, 1e-300)) - log_t
    side = 0
    for _ in range(40):
        if target - e_hi <= tolerance or s_hi / s_lo - 1 < 1e-4 or not budget.allows():
            break
        x_lo, x_hi = math.log(s_lo), math.log(s_hi)
        x = x_hi - f_hi * (x_hi - x_lo) / (f_hi - f_lo)
        # Stay strictly inside the bracket; fall back to bisection near its ends.
        if not x_lo + 0.01 * (x_hi - x_lo) < x < x_hi - 0.01 * (x_hi - x_lo):
            x = (x_lo + x_hi) / 2
        sigma = math.exp(x)
        e = eps(sigma)
        f = math.log(max(e, 1e-300)) - log_t
        if e <= target:
            s_hi, e_hi, f_hi = sigma, e, f
            if side == 1:
                f_lo /= 2
            side = 1
        else:
            s_lo, e_lo, f_lo = sigma, e, f
            if side == -1:
                f_hi /= 2
            side = -1
    return s_hi
