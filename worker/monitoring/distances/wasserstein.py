"""Wasserstein-1 (earth mover's) distance between two histograms on the same public bins.

The area between the two CDFs with each bin's mass at its public centre, in the feature's
units (a drift of 2.5 on PHQ-9 reads as 2.5 points). No threshold: units differ per feature, so
it is shown beside PSI and joins the verdict only where a caller sets one.
"""

import numpy as np

from worker.histogram_metrics import ratio
from worker.monitoring.distances.registry import Distance, register


def wasserstein(reference: np.ndarray, follow_up: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """W1 on the centres of plain proportions; NaN where a side has no rows."""
    def proportions(counts: np.ndarray) -> np.ndarray:
        return ratio(counts, counts.sum(axis=-1, keepdims=True))

    gap = np.cumsum(proportions(follow_up) - proportions(reference), axis=-1)[..., :-1]
    return (np.abs(gap) * np.diff(centres)).sum(axis=-1)


NOISE_CEILING = 0.015
"""Withheld where noise alone would make W1 of two identical cohorts this share of the span of
the bins' centres: the estimate cannot go below 0, so where the truth is small beside the
noise it reads high by about a quarter of the noise's own W1 (bench/coverage.py)."""

WASSERSTEIN = register(Distance("wasserstein", wasserstein, threshold=None,
                                noise_ceiling=NOISE_CEILING, in_units=True))
