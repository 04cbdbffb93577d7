"""Drift between a model's training-time evaluation and a later monitoring run: post-processing.

Why: a monitoring run releases, once, the same noisy score-bin x outcome histograms as the
training-time evaluation (``worker.evaluation``) plus a noisy histogram of each feature on public
bins. Everything here reads only those released counts and their known Gaussian noise std (every
cell independent), so each figure is post-processing and costs no privacy.

Noise biases these statistics. A feature's distances (PSI, Wasserstein-1, any registered in
``worker.monitoring.distances``) are inflated by noise even when nothing changed; each is
estimated with that inflation matched and removed (``worker.monitoring.distances.estimate``).
A metric of the projected (non-negative) counts moves with the noise per cell, more so for a
small group or a small follow-up, so the performance intervals are *basic* (reverse-percentile)
parametric bootstrap intervals that read all but the calibration slope off the counts as
released, where they have no projection bias at all (``worker.monitoring.ratios``,
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
from worker.evaluation import DIGITS, MIN_CLASS_ROWS, NOISE_FLOOR, json_safe
from worker.histogram_metrics import (
    Stats,
    project_nonnegative,
    representatives,
)
from worker.monitoring.distances import DISTANCES
from worker.monitoring.distances.estimate import Estimate, estimate
from worker.monitoring.ratios import ratio_metrics
from worker.monitoring.verdicts import (
    basic_interval,
    ideal_verdict,
    verdict,
)

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


def outward(low: float, high: float, digits: int = DIGITS) -> list[float]:
    """An interval rounded away from its centre to ``digits`` decimals (``json_safe`` then keeps
    it): rounded to nearest, a bound within half a unit of the value shown would let a small
    positive truth fall outside, as [0, 0] for a distance of 3e-05."""
    scale = 10.0**digits
    return [math.floor(low * scale) / scale, math.ceil(high * scale) / scale]


# --- features -----------------------------------------------------------------------------------

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


def _drift_verdict(found: dict[str, Estimate], thresholds: Mapping[str, float | None]) -> str:
    """"drift" when a distance's lower bound exceeds its threshold, "no_drift" when every
    thresholded distance's upper bound is below it, else "inconclusive"."""
    checks: list[tuple[float, float, float]] = []
    for name, threshold in thresholds.items():
        if threshold is not None:
            low, high = found[name].low, found[name].high
            if low is None or high is None:
                return "inconclusive"
            checks.append((low, high, threshold))
    if not checks:
        return "inconclusive"
    if any(low > t for low, _, t in checks):
        return "drift"
    return "no_drift" if all(high < t for _, high, t in checks) else "inconclusive"


def feature_drift(reference: NoisyHistogram, follow_up: NoisyHistogram, *,
                  centres: np.ndarray, rng: np.random.Generator, n_bootstrap: int = 1000,
                  level: float = 0.95, psi_threshold: float = 0.1,
                  wasserstein_threshold: float | None = None) -> dict[str, Any]:
    """Has one feature's distribution moved between two noisy histograms on the same bins?

    Each side is projected to non-negative counts (total kept); every registered distance
    (``worker.monitoring.distances``: PSI, Wasserstein-1 on the ``centres``) is then estimated
    without the noise's bias, with an interval that covers the distance between the two
    cohorts' histograms (``worker.monitoring.distances.estimate``).

    Verdict: "drift" when the interval's lower bound exceeds ``psi_threshold`` (or, if given,
    W1's exceeds ``wasserstein_threshold``), i.e. the distance is above the threshold at
    one-sided (1 - level) / 2 error; "no_drift" when every upper bound is below its threshold;
    "inconclusive" otherwise, or when a side's rows are below the noise floor or no interval
    could be made. Its false-alarm rate is measured in tests/worker/test_monitoring_drift.py.

    Args:
        reference, follow_up: 1-d noisy counts over the same public bins, with their noise std.
        centres: (n_bins,) increasing public values of the bins, in the feature's units.
        rng: the bootstrap's generator.
        n_bootstrap: noise draws (0: no intervals, verdict "inconclusive").
        level: the intervals' two-sided coverage.
        psi_threshold, wasserstein_threshold: the smallest distance that counts as drift.

    Returns:
        per registered distance ``<name>`` and ``<name>_ci`` (None where withheld, the reason
        in ``notes``); verdict, reference_rows, follow_up_rows (floats rounded by
        ``worker.evaluation.json_safe``; None where undefined).

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
    out: dict[str, Any] = {"verdict": "inconclusive", "reference_rows": ref.sum(),
                           "follow_up_rows": fup.sum(), "notes": []}
    thresholds = {name: d.threshold for name, d in DISTANCES.items()}
    thresholds.update(psi=psi_threshold, wasserstein=wasserstein_threshold)
    found = {name: estimate(d, ref, fup, stds=(reference.noise_std, follow_up.noise_std),
                            centres=centres, rng=rng, n_bootstrap=n_bootstrap, level=level)
             for name, d in DISTANCES.items()} if usable else {}
    for name in DISTANCES:
        out[name], out[f"{name}_ci"] = None, None
        got = found.get(name)
        if got is not None and got.withheld is not None:
            out["notes"].append(got.withheld)
        elif got is not None:
            out[name] = got.value
            if got.low is not None and got.high is not None:
                out[f"{name}_ci"] = outward(got.low, got.high)
    if usable and n_bootstrap > 0:
        out["verdict"] = _drift_verdict(found, thresholds)
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
    """Metrics as released (usable ones only, else NaN) and their replicates,
    placed for projection-free basic intervals (``score_units``)."""

    estimate: Stats  # metric -> (units,)
    boot: Stats  # metric -> (n_bootstrap, units)


def score_units(counts: np.ndarray, noise_std: float, edges: np.ndarray,
                thresholds: Mapping[str, float], rng: np.random.Generator,
                n_bootstrap: int) -> Scored:
    """Score noisy (units, n_bins, 2) counts and ``n_bootstrap`` replicates of them.

    Estimates: all but the slope read off the counts as released (``ratio_metrics``: unbiased
    numerators and denominators whatever the noise), as the evaluation shows them; the slope
    off the projected counts. Each replicate (Poisson draws around the projected counts plus
    fresh noise, scored the same way) is stored as its deviation from its truth (the projected
    counts' metrics) plus the estimate ``r``, so the basic interval about r, ``2 r - q``, is r
    minus the deviations' quantiles, for any contrast of units too (a change, a gap).

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
    return Scored({k: np.where(usable[k], v, np.nan) for k, v in released.items()},
                  {k: boot[k] - point[k] + released[k] for k in METRICS})


def _harm(metric: str, ref: np.ndarray, fup: np.ndarray) -> np.ndarray:
    """How much worse the follow-up is (> 0: worse), in the metric's units."""
    if metric in IDEAL:
        return np.abs(fup - IDEAL[metric]) - np.abs(ref - IDEAL[metric])
    return fup - ref if metric in HIGHER_IS_WORSE else ref - fup


def _change(metric: str, ref: Scored, fup: Scored, level: float) -> list[dict[str, Any]]:
    """Per unit: both values, the change, its interval, and the verdict (on the harm). A value
    one side's release cannot support is withheld on both (like with like)."""
    x, y = ref.estimate[metric], fup.estimate[metric]
    both = np.isfinite(x) & np.isfinite(y)
    x, y = np.where(both, x, np.nan), np.where(both, y, np.nan)
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
