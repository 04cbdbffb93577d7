"""Privacy figures for people: the privacy unit, and epsilons rounded so they never understate.

Every epsilon that leaves the service in words or rounded goes through here: spend is rounded
up, what remains is rounded down, and non-private spend reads "infinity" (JSON has none).
"""

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal

PRIVACY_UNIT = "record (one patient)"
INFINITY = "infinity"


def round_up(value: float, digits: int = 3) -> float:
    """Round up to ``digits`` significant digits: a rounded epsilon must never understate spend."""
    return _round_significant(value, digits, up=True)


def round_down(value: float, digits: int = 3) -> float:
    """Round down to ``digits`` significant digits: a remaining budget must never be overstated."""
    return _round_significant(value, digits, up=False)


def _round_significant(value: float, digits: int, *, up: bool) -> float:
    """Exact decimal rounding of the float (no overflow at tiny values, no float noise).

    A float that *is* a ``digits``-digit number (2.68 is stored as 2.6800000000000002) keeps
    that number; otherwise the rounding goes strictly in ``up``'s direction, so the result is
    never below (up) or above (down) ``value``.
    """
    if value <= 0 or not math.isfinite(value):
        return value
    exact = Decimal(value)
    quantum = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    nearest = float(exact.quantize(quantum, rounding=ROUND_HALF_EVEN))
    if nearest == value:
        return nearest
    return float(exact.quantize(quantum, rounding=ROUND_CEILING if up else ROUND_FLOOR))


def epsilon_text(value: float | None, *, non_private: bool = False, digits: int = 3) -> str:
    """Epsilon for people: ``"infinity"`` for non-private spend, else rounded up."""
    if non_private or value is None or math.isinf(value):
        return INFINITY
    return f"{round_up(value, digits):.{digits}g}"
