"""The smallest allowed noise multiplier that passes a test: one bisection shared by the
filter's largest fitting release and a search's (``app.privacy.filter``,
``app.privacy.selection``)."""

import math
from collections.abc import Callable

from app.privacy.accounting import MAX_NOISE_MULTIPLIER, MIN_NOISE_MULTIPLIER


def smallest_allowed_noise(fits: Callable[[float], bool], *, geometric: bool = False
                           ) -> float | None:
    """The smallest noise multiplier in [MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER] (to
    1e-4 relative, rounded up) for which ``fits`` (monotone: more noise never fits less)
    holds; None when not even the largest does. Bisection, at the arithmetic midpoint or
    (``geometric``) the geometric one."""
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    if not fits(high):
        return None
    if fits(low):
        return low
    while high - low > 1e-4 * high:
        mid = math.sqrt(low * high) if geometric else 0.5 * (low + high)
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high
