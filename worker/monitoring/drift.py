"""Drift between a model's training-time evaluation and a later monitoring run: post-processing.

Why: a monitoring run releases, once, the same noisy score-bin x outcome histograms as the
training-time evaluation (``worker.evaluation``) plus a noisy histogram of each feature on public
bins. Everything here reads only those released counts and their known Gaussian noise std (every
cell independent), so each figure is post-processing and costs no privacy.

Noise biases these statistics: PSI is >= 0 and inflated by noise even when nothing changed,
and a metric of the projected (non-negative) counts moves with the noise per cell, more so for
a small group or a small follow-up. So every interval is a *basic* (reverse-percentile)
parametric bootstrap interval ``[2 t - q_hi, 2 t - q_lo]``: the replicates, drawn around the
estimate ``t`` (``worker.histogram_metrics.replicates``: Poisson sampling, fresh noise of the
release's std, re-projected), carry the bias once more, and reflecting them about ``t`` removes
it to first order (a percentile interval would add it again). For the performance metrics that
was not enough (the pull is steeper in the truth's sparse cells than in the projected ones the
bootstrap starts from), so their intervals read all but the calibration slope off the counts
as released, where they have no projection bias at all (``worker.monitoring.ratios``,
``score_units``).
``worker.monitoring.fairness`` (gaps within one release) uses the helpers here.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.bands import Band, band_index, cut_offs
from worker.dp_histogram import NEGATIVE, POSITIVE, all_edges
from worker.evaluation import MIN_CLASS_ROWS, NOISE_FLOOR, json_safe
from worker.histogram_metrics import (
    Stats,
    project_nonnegative,
    ratio,
    replicates,
    representatives,
)
from worker.monitoring.ratios import ratio_metrics
from worker.monitoring.verdicts import (
    basic_interval,
    ideal_verdict,
    verdict,
)

PSI_FLOOR_COUNTS = 0.5
"""Counts spread over a histogram's bins (0.5 / n_bins each) before PSI's proportions: its log
needs every proportion > 0, and half a row in all, far below any release's noise, matters only
where a bin is (estimated) empty on one side."""
METRICS = ("roc_auc", "brier", "calibration_in_the_large", "calibration_slope",
           "precision_high", "recall_high")
IDEAL = {"calibration_in_the_large": 0.0, "calibration_slope": 1.0}
"""Metrics with an ideal value: worse / better is judged on the distance from it."""
HIGHER_IS_WORSE = frozenset({"brier"})
SLOPE_ITERATIONS, SLOPE_TOLERANCE = 30, 1e-8


@dataclass(frozen=True)
class NoisyHistogram:
    """Counts as released by a Gaussian mechanism and the std of every cell's noise."""

    counts: np.ndarray  # noisy counts as released (may be negative), shape (..., n_bins)
    noise_std: float  # Gaussian std of every cell (0 = exact)


def floor(noise_std: float, cells: int, minimum: float = 1.0) -> float:
    """Smallest usable denominator summing ``cells`` noisy cells (``worker.evaluation``'s rule:
    ``NOISE_FLOOR`` noise stds of the sum, so the true denominator is unlikely to be 0)."""
    return max(minimum, NOISE_FLOOR * noise_std * math.sqrt(cells))


# --- features -----------------------------------------------------------------------------------

def _proportions(counts: np.ndarray, spread: float) -> np.ndarray:
    total = counts.sum(axis=-1, keepdims=True)
    return np.where(total > 0, ratio(counts + spread / counts.shape[-1], total + spread), np.nan)


def _psi_w1(ref: np.ndarray, fup: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, ...]:
    """PSI (floored proportions) and Wasserstein-1 on the centres (plain proportions)."""
    p_r, p_f = _proportions(ref, PSI_FLOOR_COUNTS), _proportions(fup, PSI_FLOOR_COUNTS)
    psi = ((p_f - p_r) * np.log(p_f / p_r)).sum(axis=-1)
    cdf_gap = np.cumsum(_proportions(fup, 0.0) - _proportions(ref, 0.0), axis=-1)[..., :-1]
    return psi, (np.abs(cdf_gap) * np.diff(centres)).sum(axis=-1)


def _check_features(reference: NoisyHistogram, follow_up: NoisyHistogram, centres: np.ndarray,
                    n_bootstrap: int, level: float) -> None:
    shape = np.shape(reference.counts)
    if len(shape) != 1 or np.shape(follow_up.counts) != shape or centres.shape != shape:
        raise ValueError("reference, follow_up and centres must be 1-d over the same bins")
    if shape[0] < 2 or not np.all(np.diff(centres) > 0):
        raise ValueError("centres must be at least 2 increasing values")
    if not all(math.isfinite(h.noise_std) and h.noise_std >= 0 for h in (reference, follow_up)):
        raise ValueError("noise_std must be finite and >= 0")
    if n_bootstrap < 0 or not 0 < level < 1:
        raise ValueError("n_bootstrap must be >= 0 and level in (0, 1)")


def _drift_verdict(values: tuple[np.ndarray, ...], boots: tuple[np.ndarray, ...], level: float,
                   thresholds: tuple[float, float | None]) -> dict[str, Any]:
    """psi_ci, wasserstein_ci (clipped at 0) and the verdict (``feature_drift``'s rule)."""
    out: dict[str, Any] = {"verdict": "inconclusive"}
    checks = []  # (low, high, threshold) of each distance with a threshold
    for key, value, boot, threshold in zip(("psi", "wasserstein"), values, boots, thresholds,
                                           strict=True):
        low, high = (float(b) for b in basic_interval(value, boot, level))
        out[f"{key}_ci"] = None if math.isnan(low) else [max(0.0, low), max(0.0, high)]
        if threshold is not None:
            checks.append((low, high, threshold))
    if all(math.isfinite(low) and math.isfinite(high) for low, high, _ in checks):
        if any(low > threshold for low, _, threshold in checks):
            out["verdict"] = "drift"
        elif all(high < threshold for _, high, threshold in checks):
            out["verdict"] = "no_drift"
    return out


def feature_drift(reference: NoisyHistogram, follow_up: NoisyHistogram, *,
                  centres: np.ndarray, rng: np.random.Generator, n_bootstrap: int = 1000,
                  level: float = 0.95, psi_threshold: float = 0.1,
                  wasserstein_threshold: float | None = None) -> dict[str, Any]:
    """Has one feature's distribution moved between two noisy histograms on the same bins?

    Each side is projected to non-negative counts (total kept), then to proportions, with
    ``PSI_FLOOR_COUNTS`` spread over its bins for PSI = sum (p_f - p_r) ln(p_f / p_r) only;
    Wasserstein-1 is the area between the two CDFs on the ``centres``. Intervals are basic
    bootstrap intervals (module docstring) clipped at 0: noise inflates both distances even
    between identical distributions, and the reflection takes that inflation back out.

    Verdict: "drift" when the interval's lower bound exceeds ``psi_threshold`` (or, if given,
    W1's exceeds ``wasserstein_threshold``), i.e. the distance is above the threshold at
    one-sided (1 - level) / 2 error; "no_drift" when every upper bound is below its threshold;
    "inconclusive" otherwise, or when a side's rows are below the noise floor or no interval
    could be made. Its false-alarm rate is measured in tests/worker/test_monitoring_drift.py.

    Args:
        reference, follow_up: 1-d noisy counts over the same public bins, with their noise std.
        centres: (n_bins,) increasing public values of the bins, in the feature's units.
        rng: the bootstrap's generator.
        n_bootstrap: replicates (0: no intervals, verdict "inconclusive").
        level: the intervals' two-sided coverage.
        psi_threshold, wasserstein_threshold: the smallest distance that counts as drift.

    Returns:
        psi, psi_ci, wasserstein, wasserstein_ci, verdict, reference_rows, follow_up_rows
        (floats rounded by ``worker.evaluation.json_safe``; None where undefined).

    Raises:
        ValueError: mismatched or non-1-d shapes, centres not increasing, bad noise or level.
    """
    centres = np.asarray(centres, dtype=np.float64)
    _check_features(reference, follow_up, centres, n_bootstrap, level)
    ref, fup = (project_nonnegative(np.asarray(h.counts, dtype=np.float64)[:, None])[:, 0]
                for h in (reference, follow_up))
    n_bins = len(centres)
    usable = (ref.sum() >= floor(reference.noise_std, n_bins)
              and fup.sum() >= floor(follow_up.noise_std, n_bins))
    psi, w1 = _psi_w1(ref, fup, centres)
    out: dict[str, Any] = {"psi": psi if usable else None, "psi_ci": None,
                           "wasserstein": w1 if usable else None, "wasserstein_ci": None,
                           "verdict": "inconclusive", "reference_rows": ref.sum(),
                           "follow_up_rows": fup.sum()}
    if usable and n_bootstrap > 0:
        boot_ref, boot_fup = (replicates(side[:, None], h.noise_std, n_bootstrap, rng)[..., 0]
                              for side, h in ((ref, reference), (fup, follow_up)))
        out.update(_drift_verdict((psi, w1), _psi_w1(boot_ref, boot_fup, centres), level,
                                  (psi_threshold, wasserstein_threshold)))
    return json_safe(out)


# --- performance --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParsedRecord:
    """A stored release record (``worker.evaluation``'s ``_release_record``) as arrays."""

    edges: np.ndarray  # inner bin edges
    noise_std: float
    units: dict[tuple[str, str], np.ndarray]  # ("", "") overall, (grouping, group): (n_bins, 2)


def parse_record(record: Mapping[str, Any]) -> ParsedRecord:
    """Read the bins, the noise std and every histogram of a release record.

    Raises:
        ValueError: a histogram whose length is not the number of bins, or a bad noise std.
    """
    bins = np.asarray(record["bins"], dtype=np.float64)
    noise_std = float(record["noise_std"])
    if bins.ndim != 1 or len(bins) < 3 or not (math.isfinite(noise_std) and noise_std >= 0):
        raise ValueError("a release record needs bins (0, inner edges, 1) and a noise std >= 0")

    def counts(split: Mapping[str, Any]) -> np.ndarray:
        out = np.zeros((len(bins) - 1, 2))
        for outcome, key in ((NEGATIVE, "negatives"), (POSITIVE, "positives")):
            values = np.asarray(split[key], dtype=np.float64)
            if values.shape != (len(bins) - 1,):
                raise ValueError(f"a histogram of {values.shape} counts on {len(bins) - 1} bins")
            out[:, outcome] = values
        return out

    histograms = record["histograms"]
    units = {("", ""): counts(histograms["all"])}
    for grouping, groups in histograms.get("by_grouping", {}).items():
        for group, split in groups.items():
            units[(str(grouping), str(group))] = counts(split)
    return ParsedRecord(bins[1:-1], noise_std, units)


def calibration_slope(neg: np.ndarray, pos: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Logistic calibration slope (Cox 1958) on binned counts, over any leading axes.

    The slope b of logit P(y) = a + b logit(predicted) fitted by maximum likelihood to each bin's
    positives out of its rows, predicted being the bins' representatives: 1 is calibrated, below
    1 the predictions are too extreme. Newton's method from (0, 1) (the calibrated answer);
    NaN where it does not converge (e.g. the classes are separated by the bins).
    """
    x = np.log(predicted) - np.log1p(-predicted)
    n = neg + pos
    a, b = np.zeros(n.shape[:-1]), np.ones(n.shape[:-1])
    step = np.full(n.shape[:-1], np.inf)
    with np.errstate(all="ignore"):  # a singular or diverging fit ends as NaN below
        for _ in range(SLOPE_ITERATIONS):
            p = 1.0 / (1.0 + np.exp(-(a[..., None] + b[..., None] * x)))
            w, r = n * p * (1 - p), pos - n * p
            g0, g1 = r.sum(axis=-1), (r * x).sum(axis=-1)
            h00, h01, h11 = w.sum(axis=-1), (w * x).sum(axis=-1), (w * x * x).sum(axis=-1)
            det = h00 * h11 - h01**2
            da, db = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
            a, b, step = a + da, b + db, np.abs(da) + np.abs(db)
    return np.where(np.isfinite(b) & (step < SLOPE_TOLERANCE), b, np.nan)


def side_metrics(counts: np.ndarray, edges: np.ndarray, thresholds: Mapping[str, float],
                 projected: np.ndarray | None = None) -> Stats:
    """Each of ``METRICS`` of counts (..., n_bins, 2), over the leading axes:
    ``worker.monitoring.ratios.ratio_metrics`` (precision and recall are those of flagging the
    high band, bins from ``medium_high`` up; calibration-in-the-large is the observed
    prevalence minus the mean predicted probability) and the calibration slope, fitted to
    ``projected`` (non-negative counts; default: ``counts``, then non-negative themselves)."""
    fit = counts if projected is None else projected
    return {**ratio_metrics(counts, edges, thresholds), "calibration_slope": calibration_slope(
        fit[..., NEGATIVE], fit[..., POSITIVE], representatives(edges))}


def side_usable(counts: np.ndarray, edges: np.ndarray, thresholds: Mapping[str, float],
                noise_std: float) -> dict[str, np.ndarray]:
    """Whether each metric's noisy denominators clear ``worker.evaluation``'s noise floors."""
    n_bins = counts.shape[-2]
    high = band_index(all_edges(edges)[:-1], thresholds) == list(Band).index(Band.HIGH)
    neg, pos = counts[..., NEGATIVE].sum(axis=-1), counts[..., POSITIVE].sum(axis=-1)
    ranking = np.minimum(neg, pos) >= floor(noise_std, n_bins, MIN_CLASS_ROWS)
    rows = neg + pos >= floor(noise_std, 2 * n_bins)
    high_rows = (counts.sum(axis=-1) * high).sum(axis=-1)
    return {"roc_auc": ranking, "brier": rows, "calibration_in_the_large": rows,
            "calibration_slope": ranking,
            "precision_high": high_rows >= floor(noise_std, 2 * int(high.sum())),
            "recall_high": pos >= floor(noise_std, n_bins)}


@dataclass(frozen=True)
class Scored:
    """Metrics of the projected counts (usable ones only, else NaN) and their replicates,
    placed for projection-free basic intervals (``score_units``)."""

    estimate: Stats  # metric -> (units,)
    boot: Stats  # metric -> (n_bootstrap, units)


def score_units(counts: np.ndarray, noise_std: float, edges: np.ndarray,
                thresholds: Mapping[str, float], rng: np.random.Generator,
                n_bootstrap: int) -> Scored:
    """Score noisy (units, n_bins, 2) counts and ``n_bootstrap`` replicates of them.

    Estimates: the projected counts' metrics, as the evaluation shows them. Intervals are
    projection-free: all but the slope are also read off the counts as released
    (``ratio_metrics``: unbiased numerators and denominators whatever the noise), and each
    replicate (Poisson draws around the projected counts plus fresh noise, scored the same way)
    is stored as its deviation from its truth (the projected counts' metrics) plus 2 t - r (t
    the estimate, r the released figure), so the basic interval about t, ``2 t - q``, is r
    minus the deviations' quantiles, for any contrast of units too (a change, a gap). Where t
    and r differ (large noise) the interval is off-centre: it, not the point, is the answer.

    Raises:
        ValueError: ``medium_high`` is not a bin edge (the high band would not be whole bins).
    """
    if not np.isclose(edges, cut_offs(thresholds)[1], rtol=0, atol=1e-12).any():
        raise ValueError("thresholds['medium_high'] must be one of the release's bin edges")
    estimate = project_nonnegative(counts)
    usable = side_usable(estimate, edges, thresholds, noise_std)
    point, released = (side_metrics(c, edges, thresholds, estimate) for c in (estimate, counts))
    draws = rng.poisson(estimate, size=(n_bootstrap, *estimate.shape)).astype(np.float64)
    if noise_std > 0:
        draws += rng.normal(0.0, noise_std, draws.shape)
    boot = side_metrics(draws, edges, thresholds, project_nonnegative(draws))
    return Scored({k: np.where(usable[k], v, np.nan) for k, v in point.items()},
                  {k: boot[k] + point[k] - released[k] for k in METRICS})


def _harm(metric: str, ref: np.ndarray, fup: np.ndarray) -> np.ndarray:
    """How much worse the follow-up is (> 0: worse), in the metric's units."""
    if metric in IDEAL:
        return np.abs(fup - IDEAL[metric]) - np.abs(ref - IDEAL[metric])
    return fup - ref if metric in HIGHER_IS_WORSE else ref - fup


def _change(metric: str, ref: Scored, fup: Scored, level: float) -> list[dict[str, Any]]:
    """Per unit: both values, the change, its interval, and the verdict (on the harm)."""
    x, y = ref.estimate[metric], fup.estimate[metric]
    bx, by = ref.boot[metric], fup.boot[metric]
    low, high = basic_interval(y - x, by - bx, level)
    harm = _harm(metric, x, y)
    harm_low, harm_high = basic_interval(harm, _harm(metric, bx, by), level)
    return [{"reference": x[u], "follow_up": y[u], "change": y[u] - x[u],
             "change_ci": None if np.isnan(low[u]) else [low[u], high[u]],
             "verdict": ideal_verdict(low[u], high[u], harm[u]) if metric in IDEAL
             else verdict(harm_low[u], harm_high[u],
                          labels=("worse", "better", "no_change", "inconclusive"))}
            for u in range(len(x))]


def performance_drift(reference: dict[str, Any], follow_up: dict[str, Any], *,
                      thresholds: Mapping[str, float], rng: np.random.Generator,
                      n_bootstrap: int = 1000, level: float = 0.95) -> dict[str, Any]:
    """How the model's held-out performance moved from one release record to a later one.

    For the whole population and every (grouping, group) in both records: ROC-AUC, Brier score,
    calibration-in-the-large, logistic calibration slope (``calibration_slope``), and precision
    and recall of the high band (``side_metrics``), each side's figures those of its own
    projected counts, as its evaluation shows them; the intervals and verdicts are
    projection-free (``score_units``).
    ``change`` is follow-up minus reference; ``change_ci`` a basic interval from a joint
    parametric bootstrap of both releases (independent noise, each record's std). Verdict on
    the harm (the change, sign-flipped where higher is better; for calibration the change in
    distance from the ideal 0 or 1) by ``verdict``: "worse" / "better" when its interval
    excludes 0, "no_change" within +-``NO_CHANGE_TOLERANCE``, else "inconclusive". A metric
    below a side's noise floor (``side_usable``) is None, verdict "inconclusive".

    Args:
        reference, follow_up: release records as stored (the training model's is
            ``metrics["release"]``), on the same bins.
        thresholds: the model's band cut-offs (the high band starts at ``medium_high``).
        rng: the bootstrap's generator.
        n_bootstrap: replicates (>= 1).
        level: the intervals' two-sided coverage.

    Returns:
        {"overall": {metric: {...}}, "subgroups": [{"grouping", "group", metric: {...}}]}.

    Raises:
        ValueError: the records' bins differ, n_bootstrap < 1, or level outside (0, 1).
    """
    ref, fup = parse_record(reference), parse_record(follow_up)
    if ref.edges.shape != fup.edges.shape or not np.allclose(ref.edges, fup.edges):
        raise ValueError("the two release records must use the same bins")
    if n_bootstrap < 1 or not 0 < level < 1:
        raise ValueError("n_bootstrap must be >= 1 and level in (0, 1)")
    units = [u for u in ref.units if u in fup.units]
    ref_scored, fup_scored = (
        score_units(np.stack([r.units[u] for u in units]), r.noise_std, ref.edges, thresholds,
                    rng, n_bootstrap) for r in (ref, fup))
    changes = {m: _change(m, ref_scored, fup_scored, level) for m in METRICS}
    per_unit = [{m: changes[m][i] for m in METRICS} for i in range(len(units))]
    return json_safe({
        "overall": per_unit[0],
        "subgroups": [{"grouping": g, "group": label, **metrics}
                      for (g, label), metrics in zip(units[1:], per_unit[1:], strict=True)],
    })
