"""Noise search: the smallest noise multiplier whose accounted epsilon meets a target."""

import math
import time
from collections.abc import Callable

from app.privacy.accounting import (
    MAX_NOISE_MULTIPLIER,
    MIN_NOISE_MULTIPLIER,
    Mechanism,
    create_accountant,
    integer_order_epsilon,
)


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
    accountant. Each PRV or full-grid RDP evaluation costs 0.05-0.5 s, so the search first
    solves the closed-form integer-order RDP (an upper bound on both: its solution is feasible
    and close), then narrows with a few safeguarded regula-falsi steps on log-log scale.

    Past ``deadline_seconds`` (from the call) the search stops at the next check and returns
    the best *feasible* sigma found so far (a little more noise than needed, never less), so
    planning a request has a bounded cost: at most the deadline plus one evaluation.

    Raises:
        TargetUnreachable: the target needs more noise than MAX_NOISE_MULTIPLIER.
    """
    deadline = time.monotonic() + deadline_seconds
    acc = create_accountant(accountant)

    def eps(sigma: float) -> float:
        return acc.epsilon([Mechanism(sigma, sample_rate, steps)], delta)

    def bound(sigma: float) -> float:
        return integer_order_epsilon([(sigma, sample_rate, steps)], delta)

    if bound(MAX_NOISE_MULTIPLIER) > target_epsilon and eps(MAX_NOISE_MULTIPLIER) > target_epsilon:
        raise TargetUnreachable(target_epsilon)
    if bound(MIN_NOISE_MULTIPLIER) <= target_epsilon:
        return MIN_NOISE_MULTIPLIER  # the bound is above the accountant's epsilon
    high = _bisect(bound, target_epsilon)
    eps_high = eps(high)
    while eps_high > target_epsilon:  # not expected (the bound is above both), but be safe
        high = min(high * 1.25, MAX_NOISE_MULTIPLIER)
        eps_high = eps(high)
    if time.monotonic() > deadline:
        return high
    low = max(high / 1.25, MIN_NOISE_MULTIPLIER)
    eps_low = eps(low)
    while eps_low <= target_epsilon:
        if low == MIN_NOISE_MULTIPLIER or time.monotonic() > deadline:
            return low
        high, eps_high = low, eps_low
        low = max(low / 1.25, MIN_NOISE_MULTIPLIER)
        eps_low = eps(low)
    return _narrow(eps, target_epsilon, (low, eps_low), (high, eps_high), tolerance, deadline)


def _bisect(epsilon_of: Callable[[float], float], target: float) -> float:
    """Smallest sigma (to 1e-6 relative) with epsilon_of(sigma) <= target (cheap functions)."""
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    while high / low > 1 + 1e-6:
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
