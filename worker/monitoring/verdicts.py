"""Intervals and verdicts of monitoring's comparisons (drift, subgroup gaps, champion and
challenger): post-processing of noisy releases, shared by ``worker.monitoring.drift`` and
``worker.monitoring.fairness``."""

import numpy as np

NO_CHANGE_TOLERANCE = 0.02
"""A change (gap) whose whole interval lies within +-this is no change (no gap), even when it
excludes 0: too small to act on (every metric is on a 0-1 scale, or near 1 for the slope)."""


def basic_interval(estimate: np.ndarray, boot: np.ndarray,
                   level: float) -> tuple[np.ndarray, np.ndarray]:
    """Reverse-percentile bounds of ``estimate`` (...) from replicates ``boot`` (B, ...).

    NaN where the estimate is undefined or over (1 - level) / 2 of the replicates are (the
    metric's denominator is plausibly 0), as ``worker.histogram_metrics.intervals``."""
    tails = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    undefined = np.isnan(estimate) | (np.isnan(boot).mean(axis=0) > (1 - level) / 2)
    if undefined.all():
        nan = np.full(np.shape(estimate), np.nan)
        return nan, nan
    q_lo, q_hi = np.nanpercentile(np.where(undefined, 0.0, boot), tails, axis=0)
    low, high = 2 * estimate - q_hi, 2 * estimate - q_lo
    return np.where(undefined, np.nan, low), np.where(undefined, np.nan, high)


def verdict(low: float, high: float, *, labels: tuple[str, str, str, str]) -> str:
    """(positive, negative, none, inconclusive) label of an interval of a signed quantity.

    Within +-``NO_CHANGE_TOLERANCE``: none (it takes precedence: a difference that is surely
    small is not material even when it surely exists); above 0: positive; below 0: negative."""
    positive, negative, none, inconclusive = labels
    if not (np.isfinite(low) and np.isfinite(high)):
        return inconclusive
    if -NO_CHANGE_TOLERANCE <= low and high <= NO_CHANGE_TOLERANCE:
        return none
    if low > 0:
        return positive
    return negative if high < 0 else inconclusive


def ideal_verdict(low: float, high: float, harm: float) -> str:
    """A metric with an ideal: a real change (its interval excludes 0) is worse when it moves
    away from the ideal. (A bootstrap of the distance from the ideal is biased where the
    replicates straddle it, as a 1.04 slope's cross 1: it called a third of unshifted
    follow-ups' calibration slopes worse.)"""
    if not (np.isfinite(low) and np.isfinite(high) and np.isfinite(harm)):
        return "inconclusive"
    if -NO_CHANGE_TOLERANCE <= low and high <= NO_CHANGE_TOLERANCE:
        return "no_change"
    if (low > 0 or high < 0) and harm != 0:
        return "worse" if harm > 0 else "better"
    return "inconclusive"
