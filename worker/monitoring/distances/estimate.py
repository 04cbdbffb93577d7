"""A registered distance between two noisy histograms, without the noise's bias, with an interval.

Why: noise inflates every distance (PSI, Wasserstein-1, ...): two identical cohorts are never at
distance 0 once each cell carries noise, and the inflation is largest where the truth is
smallest. A plain bootstrap around the observed histograms adds the inflation a second time, so
its basic interval over-corrects (it missed a true W1 of 0.047 with [0, 0.035]) while the point
stays inflated (a PSI of 0.0081 outside its own [0, 0.0073]).

Here the estimate is matched to the bias (indirect inference): the two observed (projected)
histograms are pulled together, ``LAMBDAS`` along the line from their pooled proportions
(lambda 0: no distance) through themselves (1) to twice their gap (2), each side keeping its
own total; at each lambda the same noise draws (fresh Gaussian noise of each side's std,
projected as the release is) give the distance the noise would make of that truth on
average. The lambda whose average equals the observed distance is the estimate's truth, and
its distance the estimate: 0 when
the observed one is no larger than noise alone would make of identical cohorts. The interval
inverts the test along the same pulls (Neyman): every pull whose draws' central range
(``TEST_MISS``) holds the observed distance is plausible, and the interval spans their
distances (widened to hold the estimate). A percentile or basic bootstrap fails here because
the noise's inflation is not a constant shift: it is largest where the truth is near 0. The
interval covers the distance between the two cohorts' histograms as they are (the DP noise;
not their sampling, for that is the cohorts themselves).
Measured by bench/coverage.py.
"""

import math
from dataclasses import dataclass

import numpy as np

from worker.histogram_metrics import project_nonnegative
from worker.monitoring.distances.registry import Distance

TEST_MISS = 0.5
"""Each pull's test misses this share of the interval's 1 - level (a 95% interval: a 97.5%
test): the path holds the truth only roughly (its direction is the noisy observed
difference), so the test is stricter than the coverage it must give (bench/coverage.py)."""
LAMBDAS = np.linspace(0.0, 2.0, 41)
"""The pulls tried, from identical cohorts (0) through the observed histograms (1) to twice
their difference (a bin that would go negative is 0)."""


@dataclass(frozen=True)
class Estimate:
    """A distance's debiased estimate, its interval (None bounds: no interval), the observed
    figure (that of the projected noisy histograms, biased up by the noise), and why the
    release cannot support it (None: it can; else the value is not to be shown)."""

    value: float
    low: float | None
    high: float | None
    observed: float
    withheld: str | None = None


def _pulled(ref: np.ndarray, fup: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(LAMBDAS, n_bins) histograms of each side pulled towards the pooled proportions."""
    n_ref, n_fup = ref.sum(), fup.sum()
    p_ref, p_fup = ref / n_ref, fup / n_fup
    mid, half, pull = (p_ref + p_fup) / 2, (p_fup - p_ref) / 2, LAMBDAS[:, None]
    return (np.clip(mid - pull * half, 0.0, None) * n_ref,
            np.clip(mid + pull * half, 0.0, None) * n_fup)


def _noisy(truth: np.ndarray, std: float, noise: np.ndarray) -> np.ndarray:
    """(LAMBDAS, n, n_bins) releases of each truth with the shared noise draws, projected."""
    if std == 0:
        return np.broadcast_to(truth[:, None, :], (truth.shape[0], *noise.shape))
    draws = truth[:, None, :] + std * noise[None]
    return project_nonnegative(draws[..., None])[..., 0]


def estimate(distance: Distance, ref: np.ndarray, fup: np.ndarray, *, stds: tuple[float, float],
             centres: np.ndarray, rng: np.random.Generator, n_bootstrap: int,
             level: float) -> Estimate:
    """The debiased distance between two projected (non-negative) noisy histograms.

    Args:
        distance: the registered distance.
        ref, fup: (n_bins,) projected counts, each with a positive total.
        stds: each side's Gaussian noise std per cell (0: exact).
        centres: the bins' public centres.
        rng: the draws' generator.
        n_bootstrap: noise draws per pull (0: the observed figure, no interval).
        level: the interval's two-sided coverage.
    """
    observed = float(distance.of(ref, fup, centres))
    if n_bootstrap < 1 or not math.isfinite(observed):
        return Estimate(observed, None, None, observed)
    if max(stds) == 0:
        return Estimate(observed, observed, observed, observed)
    truth_ref, truth_fup = _pulled(ref, fup)
    truth = distance.of(truth_ref, truth_fup, centres)
    shape = (n_bootstrap, len(ref))
    draws = distance.of(_noisy(truth_ref, stds[0], rng.standard_normal(shape)),
                        _noisy(truth_fup, stds[1], rng.standard_normal(shape)), centres)
    expected = np.maximum.accumulate(np.nan_to_num(np.nanmean(draws, axis=1), nan=np.inf))
    ceiling = distance.ceiling(centres)
    if ceiling is not None and expected[0] > ceiling:
        return Estimate(math.nan, None, None, observed, withheld=(
            f"{distance.name} withheld: noise alone would make it about {expected[0]:.3g} "
            f"of two identical cohorts, above {ceiling:.3g}"))
    value = float(np.interp(float(np.interp(observed, expected, LAMBDAS)), LAMBDAS, truth))
    miss = (1 - level) * TEST_MISS
    q_lo, q_hi = np.nanpercentile(draws, [100 * miss / 2, 100 * (1 - miss / 2)], axis=1)
    margin = np.minimum(observed - q_lo, q_hi - observed)  # >= 0: the test keeps the pull
    margin = np.where(np.isnan(draws).mean(axis=1) <= (1 - level) / 2, margin, np.nan)
    ends = _ends(truth, margin)
    if ends is None:
        return Estimate(value, None, None, observed)
    return Estimate(value, min(ends[0], value), max(ends[1], value), observed)


def _ends(truth: np.ndarray, margin: np.ndarray) -> tuple[float, float] | None:
    """The least and greatest distance of the pulls the test keeps (``margin`` >= 0), each end
    carried on to where the test's margin crosses 0 between the last kept pull and the next
    one (linear in the margin), so the grid's step does not narrow the interval: a zero-width
    interval would hold none of the distances noise leaves plausible."""
    kept = np.flatnonzero(margin >= 0)
    if kept.size == 0:
        return None
    low, high = float(truth[kept].min()), float(truth[kept].max())
    for inner, outer in ((kept[0], kept[0] - 1), (kept[-1], kept[-1] + 1)):
        if 0 <= outer < len(truth):
            gap = margin[inner] - margin[outer]
            step = margin[inner] / gap if gap > 0 and np.isfinite(gap) else 0.0
            crossing = float(truth[inner] + step * (truth[outer] - truth[inner]))
            low, high = min(low, crossing), max(high, crossing)
    return low, high
