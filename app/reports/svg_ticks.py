"""Round tick values and their labels for the report charts (``app.reports.svg_plot``)."""

import math


def nice_step(span: float, max_ticks: int = 6, *, integer: bool = False) -> float:
    """A round tick spacing (1, 2, 2.5 or 5 times a power of ten) giving at most ``max_ticks``."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(max_ticks - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if integer and factor == 2.5:
            continue  # integer axes (epochs, entries) tick at whole numbers only
        step = factor * power
        if step >= raw:
            return max(step, 1.0) if integer else step
    return 10.0 * power


def nice_ticks(lo: float, hi: float, max_ticks: int = 6, *, integer: bool = False) -> list[float]:
    """Evenly spaced round values covering [lo, hi]; the axis is then widened to the outer ticks."""
    if hi < lo:
        lo, hi = hi, lo
    step = nice_step(hi - lo, max_ticks, integer=integer)
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    count = int(round((stop - start) / step))
    return [_clean(start + i * step) for i in range(count + 1)]


def _clean(value: float) -> float:
    """Round off float noise such as 0.30000000000000004 so tick labels stay short."""
    return float(f"{value:.12g}") + 0.0  # + 0.0 turns -0.0 into 0.0


def format_tick(value: float, step: float) -> str:
    """A tick label with just enough decimals to tell neighbouring ticks apart."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if step > 0 and not math.isclose(step * 10**decimals, round(step * 10**decimals)):
        decimals += 1
    return f"{value:.{decimals}f}"
