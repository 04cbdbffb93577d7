"""Noise search: the smallest noise multiplier whose accounted epsilon meets a target."""

import math
import time
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


class TargetUnreachable(ValueError):
    """No noise multiplier within the allowed range reaches the target epsilon."""


def noise_for_target(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "prv",
    tolerance: float = 0.01,
    deadline_seconds: float = 0.5,
) -> float:
    """Smallest noise multiplier (within ``tolerance`` in epsilon) whose epsilon <= target.

    The returned sigma always satisfies epsilon(sigma) <= target_epsilon for the named
    accountant: every answer is checked with it. The search solves the closed-form
    integer-order RDP first (microseconds; usually feasible and close), confirms or raises it
    with the accountant, then narrows with safeguarded regula-falsi steps on log-log scale
    using ``search_accountant`` (the headline PLD with fewer points, 4x cheaper where its PMF
    is large), and checks the narrowed sigma with the accountant before returning it.

    The narrowing stops at its first check past ``deadline_seconds`` (from the call) less the
    time one check with the accountant took (none when the search used the accountant
    itself), and the best checked sigma is returned (a little more noise than needed, never
    less): a search costs the deadline plus at most one search evaluation (~10-30 ms for the
    PLD), or one check where even the first overruns it.

    Raises:
        TargetUnreachable: the target needs more noise than MAX_NOISE_MULTIPLIER.
    """
    start = time.monotonic()
    accountants = create_accountant(accountant), search_accountant(accountant)
    headline, cheap = (_epsilon_of(acc, delta, sample_rate, steps) for acc in accountants)
    same = type(accountants[0]) is type(accountants[1]) and vars(accountants[0]) == vars(
        accountants[1]
    )

    def bound(sigma: float) -> float:
        return integer_order_epsilon([(sigma, sample_rate, steps)], delta)

    guess = MIN_NOISE_MULTIPLIER
    if bound(MIN_NOISE_MULTIPLIER) > target_epsilon:
        guess = _bisect(bound, target_epsilon)
    checked = time.monotonic()
    high = _confirm(headline, guess, target_epsilon)
    reserve = 0.0 if same else time.monotonic() - checked  # time for the final check
    deadline = start + deadline_seconds - reserve
    if high == MIN_NOISE_MULTIPLIER or time.monotonic() > deadline:
        return high
    candidate = _search(cheap, target_epsilon, high, tolerance, deadline)
    if candidate < high and headline(candidate) <= target_epsilon:
        return candidate
    return high


def _epsilon_of(acc: Accountant, delta: float, sample_rate: float, steps: int) -> Epsilon:
    def eps(sigma: float) -> float:
        return acc.epsilon([Mechanism(sigma, sample_rate, steps)], delta)

    return eps


def _confirm(headline: Epsilon, sigma: float, target: float) -> float:
    """``sigma``, raised by 25% steps until the headline epsilon meets ``target``.

    The RDP guess is feasible for the PLD except where the PLD's 1e-4 discretisation is the
    looser bound (tiny per-step losses).

    Raises:
        TargetUnreachable: not even MAX_NOISE_MULTIPLIER meets it.
    """
    while headline(sigma) > target:
        if sigma >= MAX_NOISE_MULTIPLIER:
            raise TargetUnreachable(target)
        sigma = min(sigma * 1.25, MAX_NOISE_MULTIPLIER)
    return sigma


def _search(eps: Epsilon, target: float, high: float, tolerance: float, deadline: float) -> float:
    """Smallest sigma <= ``high`` found with eps(sigma) <= target before ``deadline``."""
    eps_high = eps(high)
    if eps_high > target:  # the cheaper figure is the looser: nothing to gain below ``high``
        return high
    low = max(high / 1.25, MIN_NOISE_MULTIPLIER)
    eps_low = eps(low)
    while eps_low <= target:
        if low == MIN_NOISE_MULTIPLIER or time.monotonic() > deadline:
            return low
        high, eps_high = low, eps_low
        low = max(low / 1.25, MIN_NOISE_MULTIPLIER)
        eps_low = eps(low)
    return _narrow(eps, target, (low, eps_low), (high, eps_high), tolerance, deadline)


def _bisect(epsilon_of: Callable[[float], float], target: float) -> float:
    """Smallest sigma (to 1e-4 relative) with epsilon_of(sigma) <= target (cheap functions)."""
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    while high / low > 1 + 1e-4:
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
    deadline: float,
) -> float:
    """Illinois regula falsi on (log sigma, log eps) between an infeasible and a feasible sigma.

    Keeps the invariant eps(low) > target >= eps(high) and returns ``high``, at the latest once
    ``time.monotonic()`` passes ``deadline``.
    """
    (s_lo, e_lo), (s_hi, e_hi) = low, high
    log_t = math.log(target)
    f_lo, f_hi = math.log(e_lo) - log_t, math.log(max(e_hi, 1e-300)) - log_t
    side = 0
    for _ in range(40):
        if target - e_hi <= tolerance or s_hi / s_lo - 1 < 1e-4 or time.monotonic() > deadline:
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
