"""Population stability index between two histograms on the same public bins.

PSI = sum (p_f - p_r) ln(p_f / p_r) over the bins' proportions; the conventional drift reading
is 0.1 (some) and 0.25 (major), so its threshold is 0.1. Its logs make it fragile where a bin
holds few rows: noise there inflates it most, and beyond ``NOISE_CEILING`` of noise alone the
debiased estimate still read 0.02-0.09 high (bench/coverage.py), so it is withheld there.
"""

import numpy as np

from worker.histogram_metrics import ratio
from worker.monitoring.distances.registry import Distance, register

PSI_FLOOR_COUNTS = 0.5
"""Counts spread over a histogram's bins (0.5 / n_bins each) before PSI's proportions: its log
needs every proportion > 0, and half a row in all, far below any release's noise, matters only
where a bin is (estimated) empty on one side."""


def _floored(counts: np.ndarray) -> np.ndarray:
    total = counts.sum(axis=-1, keepdims=True)
    spread = PSI_FLOOR_COUNTS / counts.shape[-1]
    return np.where(total > 0, ratio(counts + spread, total + PSI_FLOOR_COUNTS), np.nan)


def psi(reference: np.ndarray, follow_up: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """PSI of floored proportions (``PSI_FLOOR_COUNTS``); NaN where a side has no rows."""
    p_r, p_f = _floored(reference), _floored(follow_up)
    return ((p_f - p_r) * np.log(p_f / p_r)).sum(axis=-1)


NOISE_CEILING = 0.05
"""Withheld where noise alone would make PSI this large of two identical cohorts (half the
threshold): past it the estimate's bias exceeds 0.02."""

PSI = register(Distance("psi", psi, threshold=0.1, noise_ceiling=NOISE_CEILING))
