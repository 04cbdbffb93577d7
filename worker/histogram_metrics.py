"""Held-out metrics as functions of binned counts: post-processing of the evaluation's DP release.

Every function takes counts of shape (..., n_bins, 2) (bins by increasing probability; last axis
negatives, positives) and works over any leading axes, so one call scores the release, all its
subgroups, and all their bootstrap replicates at once (no per-replicate loop).

Two readings of noisy counts. ``released_summary`` reads the scalar metrics (ROC-AUC, PR-AUC,
Brier score, prevalence, the band rates) off the counts as released: each is a ratio of sums of
cells or of products of two *different* cells (a positive cell times a negative one), and the
cells' noise is independent with mean 0, so numerator and denominator have the expectation they
would have on the true counts whatever the noise. ``summary`` reads every metric, the per-bin
curves too, off the non-negative counts nearest to the released ones (``project_nonnegative``);
that projection zeroes cells the noise dominates and shrinks the rest, which pulls a ranking
metric towards chance by an amount growing with the noise per cell (0.04 of ROC-AUC at a 70%
outcome on 500 rows at epsilon 1, bench/coverage.py), so it serves only the curves (they must
stay monotone) and the bootstrap's plausible truth. A ratio whose denominator is 0 is NaN here;
the caller turns it into None.
"""

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from app.bands import BANDS, band_index
from worker.dp_histogram import NEGATIVE, POSITIVE, all_edges

Stats = dict[str, np.ndarray]


def project_nonnegative(noisy: np.ndarray) -> np.ndarray:
    """The non-negative counts closest (L2) to the noisy ones with the same total per outcome.

    Clamping each cell at 0 alone adds about 0.4 noise std per empty cell, which summed over a
    sparse histogram inflates the positives by far more than the noise on their total. Projecting
    each outcome's bins onto {x >= 0, sum x = max(0, noisy sum)} (Duchi et al. 2008) keeps the
    totals unbiased and zeroes cells that are noise. Exact counts are returned unchanged.
    """
    v = np.moveaxis(np.asarray(noisy, dtype=np.float64), -1, -2)  # (..., 2, n_bins)
    total = np.clip(v.sum(axis=-1), 0.0, None)
    u = -np.sort(-v, axis=-1)
    css = np.cumsum(u, axis=-1)
    j = np.arange(1, v.shape[-1] + 1)
    keep = u - (css - total[..., None]) / j > 0
    rho = v.shape[-1] - np.argmax(keep[..., ::-1], axis=-1)  # last j that keeps (1-based)
    tau = (np.take_along_axis(css, rho[..., None] - 1, axis=-1)[..., 0] - total) / rho
    x = np.clip(v - tau[..., None], 0.0, None)
    x = np.where(keep.any(axis=-1)[..., None], x, 0.0)
    return np.moveaxis(x, -2, -1)


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is not positive."""
    positive = denominator > 0
    return np.where(positive, numerator / np.where(positive, denominator, 1.0), np.nan)


def roc_auc(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """P(score of a positive > that of a negative), ties within a bin counting half."""
    below = np.cumsum(neg, axis=-1) - neg
    pairs = pos.sum(axis=-1) * neg.sum(axis=-1)
    return ratio((pos * (below + 0.5 * neg)).sum(axis=-1), pairs)


def flagged_counts(neg: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(true, false) positives when bin b and every bin above it are flagged, per b."""
    tp = np.cumsum(pos[..., ::-1], axis=-1)[..., ::-1]
    fp = np.cumsum(neg[..., ::-1], axis=-1)[..., ::-1]
    return tp, fp


def average_precision(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Mean over positives of the precision when flagging from their bin up (sklearn's AP on
    scores discretised to the bins: each bin is one threshold)."""
    tp, fp = flagged_counts(neg, pos)
    precision = np.nan_to_num(ratio(tp, tp + fp))  # 0 only where the bin has no positive
    return ratio((pos * precision).sum(axis=-1), pos.sum(axis=-1))


def brier(neg: np.ndarray, pos: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The Brier score of binned counts, each row predicted by its bin's representative."""
    rep = representatives(edges)
    return ratio((pos * (1.0 - rep) ** 2 + neg * rep**2).sum(axis=-1), (neg + pos).sum(axis=-1))


def representatives(edges: np.ndarray) -> np.ndarray:
    """A public probability per bin, its midpoint: what the binned Brier score predicts."""
    full = all_edges(edges)
    return 0.5 * (full[:-1] + full[1:])


def band_of_bins(edges: np.ndarray, thresholds: Mapping[str, float]) -> np.ndarray:
    """Each bin's band (the cut-offs are edges, so a bin lies in one band)."""
    return band_index(all_edges(edges)[:-1], thresholds)


def _bands(neg: np.ndarray, pos: np.ndarray, band: np.ndarray) -> Stats:
    """Rows, positives, share, precision and recall, per band, exactly and at or above it."""
    rows, all_rows, all_pos = neg + pos, (neg + pos).sum(axis=-1), pos.sum(axis=-1)
    out = {}
    for b, name in enumerate(BANDS):
        for view, mask in (("exactly", band == b), ("at_or_above", band >= b)):
            n, k = (rows * mask).sum(axis=-1), (pos * mask).sum(axis=-1)
            key = f"bands.{name.value}.{view}."
            out[key + "rows"], out[key + "positives"] = n, k
            out[key + "share_of_rows"] = ratio(n, all_rows)
            out[key + "precision"] = ratio(k, n)
            out[key + "recall"] = ratio(k, all_pos)
    return out


def summary(counts: np.ndarray, edges: np.ndarray, thresholds: Mapping[str, float]) -> Stats:
    """Every metric of (non-negative) binned counts; keys of per-bin values end in ``.bins``."""
    neg, pos = counts[..., NEGATIVE], counts[..., POSITIVE]
    n_neg, n_pos = neg.sum(axis=-1), pos.sum(axis=-1)
    rows = n_neg + n_pos
    prevalence = ratio(n_pos, rows)
    tp, fp = flagged_counts(neg, pos)
    return {
        "rows": rows,
        "negatives": n_neg,
        "positives": n_pos,
        "prevalence": prevalence,
        "roc_auc": roc_auc(neg, pos),
        "pr_auc": average_precision(neg, pos),
        "brier": brier(neg, pos, edges),
        "brier_baseline": prevalence * (1.0 - prevalence),
        "rows.bins": neg + pos,
        "positives.bins": pos,
        "observed_rate.bins": ratio(pos, neg + pos),
        "tpr.bins": ratio(tp, n_pos[..., None]),
        "fpr.bins": ratio(fp, n_neg[..., None]),
        **_bands(neg, pos, band_of_bins(edges, thresholds)),
    }


RATES = ("prevalence", "roc_auc", "pr_auc", "brier", "brier_baseline")
"""Scalar metrics of ``released_summary`` that lie in [0, 1] (with every band's share, precision
and recall): an estimate or bound past an end is clipped to it."""


def released_summary(counts: np.ndarray, edges: np.ndarray,
                     thresholds: Mapping[str, float]) -> Stats:
    """The scalar metrics of counts as released (noisy, possibly negative), unclipped.

    On non-negative counts each equals ``summary``'s figure; on noisy counts the numerators and
    denominators stay unbiased (module docstring). ROC-AUC is NaN unless both class totals are
    positive; PR-AUC's precisions are clipped to [0, 1] (a cumulative count near 0 at the top
    bins would otherwise swing it).
    """
    neg, pos = counts[..., NEGATIVE], counts[..., POSITIVE]
    n_neg, n_pos = neg.sum(axis=-1), pos.sum(axis=-1)
    rows = n_neg + n_pos
    prevalence = ratio(n_pos, rows)
    tp, fp = flagged_counts(neg, pos)
    precision = np.clip(np.nan_to_num(ratio(tp, tp + fp)), 0.0, 1.0)
    ranked = (n_neg > 0) & (n_pos > 0)  # two negative totals would give a positive product
    return {
        "rows": rows, "negatives": n_neg, "positives": n_pos, "prevalence": prevalence,
        "roc_auc": np.where(ranked, roc_auc(neg, pos), np.nan),
        "pr_auc": np.where(ranked, ratio((pos * precision).sum(axis=-1), n_pos), np.nan),
        "brier": brier(neg, pos, edges),
        "brier_baseline": prevalence * (1.0 - prevalence),
        **_bands(neg, pos, band_of_bins(edges, thresholds)),
    }


def is_rate(key: str) -> bool:
    """Whether a ``released_summary`` key is a figure in [0, 1] (not a count)."""
    return key in RATES or key.endswith(("share_of_rows", "precision", "recall"))


def noisy_draws(
    estimate: np.ndarray, noise_std: float, n: int, rng: np.random.Generator
) -> np.ndarray:
    """(n, *estimate.shape) plausible releases had ``estimate`` been the true counts.

    Parametric bootstrap over the release: true counts are drawn around the estimate (Poisson:
    sampling variation of the held-out rows) and fresh Gaussian noise of the release's std is
    added. Intervals from these cover both the sampling and the DP noise.
    """
    draws = rng.poisson(estimate, size=(n, *estimate.shape)).astype(np.float64)
    if noise_std > 0:
        draws += rng.normal(0.0, noise_std, draws.shape)
    return draws


def replicates(
    estimate: np.ndarray, noise_std: float, n: int, rng: np.random.Generator
) -> np.ndarray:
    """``noisy_draws`` post-processed as the release is (``project_nonnegative``)."""
    return project_nonnegative(noisy_draws(estimate, noise_std, n, rng))


def pivot_intervals(released: Stats, deviations: Stats, level: float) -> tuple[Stats, Stats]:
    """Basic (reverse-percentile) intervals ``[r - q_hi, r - q_lo]`` about each released figure
    ``r`` from its replicates' deviations from their own truth (first axis); NaN where too many
    replicates are undefined, as ``intervals``."""
    low, high = intervals(deviations, level)
    return ({k: released[k] - high[k] for k in deviations},
            {k: released[k] - low[k] for k in deviations})


def intervals(boot: Stats, level: float) -> tuple[Stats, Stats]:
    """Percentile intervals over the first axis; NaN where too many replicates are undefined
    (a metric whose denominator is plausibly 0 has no interval)."""
    tails = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
    low, high = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: handled below
        for key, values in boot.items():
            lo, hi = nanpercentile(values, tails)
            undefined = np.isnan(values).mean(axis=0) > (1 - level) / 2
            low[key], high[key] = np.where(undefined, np.nan, lo), np.where(undefined, np.nan, hi)
    return low, high


def nanpercentile(values: np.ndarray, q: Sequence[float], axis: int = 0) -> np.ndarray:
    """``np.nanpercentile(values, q, axis=axis)`` (its default 'linear' method), the same figures
    without its per-column Python loop: each column sorted with NaN last, then interpolated at
    that column's own count of non-NaN values with numpy's own steps (``_lerp`` of
    ``numpy.lib._function_base_impl``), so each column's figure is the one numpy gives it alone;
    an all-NaN column gives NaN (without numpy's warning). Without NaN it is ``np.percentile``,
    and one column is numpy's own.
    """
    a = np.moveaxis(np.asarray(values, dtype=np.float64), axis, 0)
    if not np.isnan(a).any():
        return np.percentile(a, q, axis=0)
    if a.ndim == 1:  # one column: numpy has no loop to save
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all NaN: NaN
            return np.nanpercentile(a, q)
    quantiles = np.true_divide(np.asarray(q, dtype=np.float64), 100)[:, None]  # (Q, 1)
    ranked = np.sort(a.reshape(a.shape[0], -1), axis=0)  # (B, C): NaN last
    last = ranked.shape[0] - 1 - np.isnan(ranked).sum(axis=0)  # (C,) a column's top index
    virtual = last * quantiles  # (Q, C), numpy's (n - 1) * q
    above = virtual >= last  # numpy takes the top value there, with its index -1 in the gamma
    below = virtual < 0  # only all-NaN columns (last = -1)
    floor = np.where(below, 0.0, np.where(above, -1.0, np.floor(virtual)))
    gamma = virtual - floor
    at = np.where(below, 0, np.where(above, last, floor)).astype(np.intp)
    left = np.take_along_axis(ranked, at, axis=0)
    right = np.take_along_axis(ranked, np.where(above | below, at, at + 1), axis=0)
    diff = right - left
    result = left + diff * gamma
    np.subtract(right, diff * (1 - gamma), out=result, where=gamma >= 0.5)
    result[:, last < 0] = np.nan
    return result.reshape(len(quantiles), *a.shape[1:])
