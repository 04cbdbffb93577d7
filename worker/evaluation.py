"""Held-out evaluation as one DP release: every metric is post-processing of noisy histograms.

Why: these metrics are served to every role and printed in the privacy reports, so they must be
covered by the guarantee. The evaluation part is a per-record random part disjoint from the
training and calibration parts; one Gaussian mechanism (``worker.dp_histogram``) releases its
score-bin x outcome counts, overall and per subgroup, with the noise multiplier the worker derives
from the training (``app.privacy.parallel``: parallel composition, no extra spend). Everything else
(``worker.histogram_metrics``) reads only those noisy counts: no single patient's value, no order
statistic, no exact count leaves here unless the noise multiplier is 0 (public data, marked
``"exact": true``). Intervals are a parametric bootstrap over the release, so they include the
DP noise. The output is stored as JSON: floats, ints, None, strings, lists and dicts, no NaN.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.bands import BANDS, interval, validate_thresholds
from app.core.errors import InvalidRequest
from worker import band_rows
from worker.dp_histogram import NEGATIVE, POSITIVE, Release, all_edges, release
from worker.evaluation_text import DEFINITIONS, POST_PROCESSING, ci_method
from worker.histogram_metrics import (
    Stats,
    band_of_bins,
    intervals,
    is_rate,
    noisy_draws,
    pivot_intervals,
    project_nonnegative,
    released_summary,
    representatives,
    summary,
)

N_BOOTSTRAP = 1000
CI_LEVEL = 0.95
MIN_CLASS_ROWS = 5
"""A ranking metric needs at least this many (noisy) positives and negatives."""
NOISE_FLOOR = 2.0
"""A metric is None when its (noisy) denominator is below this many noise stds of that
denominator: the true denominator could then be 0 and the metric is mostly noise."""
PR_AUC_NOISE_SHARE = 0.15
"""PR-AUC is withheld where the noise std of the positives' total is above this share of it:
its precisions at the top bins are ratios of a few noisy cells, and each positive bin's count
shares its noise with its own precision, which read PR-AUC up to 0.06 high at a 5% outcome on
2,000 rows at epsilon 1 (bench/coverage.py)."""
PERCENTILE = ("pr_auc",)
"""Scalar metrics whose interval is the percentile one of the replicates' released figures:
PR-AUC's noise bias is far larger at the projected counts the replicates are drawn around
than at the truth (the projection empties the top bins), so a basic interval carries that
bias in and misses; the percentile one keeps the estimator's own bias, as the released
figure does."""
DIGITS = 4


def json_safe(value: Any) -> Any:
    """Round floats to DIGITS, turn NaN/inf into None, tuples into lists, numpy into Python."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return round(float(value), DIGITS) if np.isfinite(value) else None
    return value


@dataclass(frozen=True)
class Scored:
    """The metrics of one released histogram (and its subgroups), with interval bounds."""

    stats: Stats
    low: Stats
    high: Stats
    noise_std: float
    band: np.ndarray  # band index of each bin
    sizes: Stats = field(default_factory=dict)  # band rows apart from their cells (band_rows)

    def floor(self, cells: int, minimum: float = 1.0) -> float:
        """Smallest usable denominator summing ``cells`` noisy cells."""
        return max(minimum, NOISE_FLOOR * self.noise_std * math.sqrt(cells))

    def size(self, key: str, at: tuple[int, ...]) -> float:
        """A band view's rows estimated apart from its own cells (``worker.band_rows``), or its
        own noisy rows where no such estimate exists."""
        return float(self.sizes.get(key, self.stats[key])[at])

    def pick(self, key: str, at: tuple[int, ...], usable: bool = True) -> tuple[Any, Any]:
        """(value, [low, high]) of a metric at index ``at``; None where not usable."""
        value = self.stats[key][at]
        if not usable or not np.all(np.isfinite(value)):
            return None, None
        if key not in self.low:
            return value, None
        lo, hi = self.low[key][at], self.high[key][at]
        return value, (None if np.isnan(lo) or np.isnan(hi) else [lo, hi])


def score(noisy: np.ndarray, rel: Release, thresholds: Mapping[str, float],
          rng: np.random.Generator, n_bootstrap: int) -> Scored:
    """Post-process one noisy histogram: estimates, metrics, and bootstrap intervals.

    The scalar metrics are read off the counts as released (``released_summary``: unbiased
    numerators and denominators), the per-bin curves off the projected counts. Replicates are
    drawn around the projected counts (the plausible truth ``G``); a scalar's interval is the
    basic one about its released figure from the replicates' deviations from ``G``'s figure
    (the estimator's error, noise and sampling both), a curve's and PR-AUC's (``PERCENTILE``)
    the percentile one. Rates are
    clipped to [0, 1], and each interval widened to hold its own point estimate.
    """
    estimate = project_nonnegative(noisy)
    stats = summary(estimate, rel.edges, thresholds)
    released = released_summary(noisy, rel.edges, thresholds)
    low: Stats = {}
    high: Stats = {}
    if n_bootstrap > 0:
        draws = noisy_draws(estimate, rel.noise_std, n_bootstrap, rng)
        low, high = intervals(summary(project_nonnegative(draws), rel.edges, thresholds),
                              CI_LEVEL)
        boot = released_summary(draws, rel.edges, thresholds)
        scalar_low, scalar_high = pivot_intervals(
            released, {k: boot[k] - stats[k] for k in released}, CI_LEVEL)
        low.update(scalar_low)
        high.update(scalar_high)
        percentile_low, percentile_high = intervals({k: boot[k] for k in PERCENTILE}, CI_LEVEL)
        low.update(percentile_low)
        high.update(percentile_high)
    for key, value in released.items():
        if is_rate(key):
            value = np.clip(value, 0.0, 1.0)
        stats[key] = value
        if key in low:
            bounds = (np.minimum(low[key], value), np.maximum(high[key], value))
            low[key], high[key] = (np.clip(b, 0.0, 1.0) if is_rate(key) else b for b in bounds)
    return Scored(stats, low, high, rel.noise_std, band_of_bins(rel.edges, thresholds))


def _count(value: Any) -> float:
    """A noisy count as shown: one decimal (it is an estimate, not a tally)."""
    return round(float(value), 1)


def _bands(s: Scored, at: tuple[int, ...],
           thresholds: Mapping[str, float]) -> tuple[dict[str, Any], list[str]]:
    """Each band's figures, and a line per view whose precision is withheld: its rows, estimated
    apart from its own cells (``Scored.size``), are under the floor of its count."""
    n_bins = len(s.band)
    rows_ok = s.stats["rows"][at] >= s.floor(2 * n_bins)
    pos_ok = s.stats["positives"][at] >= s.floor(n_bins)
    out: dict[str, Any] = {}
    withheld = []
    for b, band in enumerate(BANDS):
        p_from, p_to = interval(band, thresholds)
        out[band.value] = {"p_from": p_from, "p_to": p_to}
        for view, bins_in in (("exactly", int((s.band == b).sum())),
                              ("at_or_above", int((s.band >= b).sum()))):
            key = f"bands.{band.value}.{view}."
            size, floor = s.size(key + "rows", at), s.floor(2 * bins_in)
            entry: dict[str, Any] = {"rows": _count(s.stats[key + "rows"][at]),
                                     "positives": _count(s.stats[key + "positives"][at])}
            for metric, usable in (("share_of_rows", rows_ok), ("precision", size >= floor),
                                   ("recall", pos_ok)):
                entry[metric], entry[f"{metric}_ci"] = s.pick(key + metric, at, usable)
            if size < floor and s.noise_std > 0:  # exact counts: an empty band, no ratio
                withheld.append(f"{band.value} {view.replace('_', ' ')} (about {size:.0f} "
                                f"rows, under {floor:.0f})")
            out[band.value][view] = entry
    return out, withheld


def _core(s: Scored, at: tuple[int, ...],
          thresholds: Mapping[str, float]) -> tuple[dict[str, Any], list[str]]:
    """Metrics shared by the whole evaluation part and each subgroup, with notes on gaps."""
    n_bins, notes = len(s.band), []
    rows, pos, neg = (float(s.stats[k][at]) for k in ("rows", "positives", "negatives"))
    rows_ok = rows >= s.floor(2 * n_bins)
    ranking_floor = s.floor(n_bins, MIN_CLASS_ROWS)
    ranking_ok = min(pos, neg) >= ranking_floor
    precision_floor = max(ranking_floor, s.noise_std * math.sqrt(n_bins) / PR_AUC_NOISE_SHARE)
    pr_ok = ranking_ok and pos >= precision_floor
    if not rows_ok:
        notes.append(f"about {rows:.0f} rows (noisy): fewer than {s.floor(2 * n_bins):.0f}, "
                     "prevalence and Brier score not reported")
    if not ranking_ok:
        notes.append(f"about {pos:.0f} positives and {neg:.0f} negatives (noisy): fewer than "
                     f"{ranking_floor:.0f} in a class, ROC-AUC and PR-AUC not reported")
    elif not pr_ok:
        notes.append(f"about {pos:.0f} positives (noisy): fewer than {precision_floor:.0f}, "
                     "PR-AUC not reported (its top bins' precisions would be mostly noise)")
    core: dict[str, Any] = {"rows": _count(rows), "positives": _count(pos)}
    for key, usable in (("prevalence", rows_ok), ("roc_auc", ranking_ok),
                        ("pr_auc", pr_ok), ("brier", rows_ok)):
        core[key], core[f"{key}_ci"] = s.pick(key, at, usable)
    core["brier_baseline"] = s.pick("brier_baseline", at, rows_ok)[0]
    core["bands"], withheld = _bands(s, at, thresholds)
    if withheld:
        notes.append("band precision not reported where the band's rows, estimated apart from "
                     "its own noisy counts, are under twice the noise on its count (a ratio of "
                     "so few noisy rows is biased): " + ", ".join(withheld))
    return core, notes


def _reliability(s: Scored, edges: np.ndarray) -> list[dict[str, Any]]:
    """Per public bin: its edges and representative, noisy rows and positives, observed rate."""
    full, rep = all_edges(edges), representatives(edges)
    rows = s.stats["rows.bins"]
    out = []
    for b in range(len(rep)):
        rate, ci = s.pick("observed_rate.bins", (b,), bool(rows[b] >= s.floor(2)))
        out.append({"p_from": full[b], "p_to": full[b + 1], "p_representative": rep[b],
                    "rows": _count(rows[b]), "positives": _count(s.stats["positives.bins"][b]),
                    "observed_rate": rate, "observed_ci": ci})
    return out


def _roc_curve(s: Scored, edges: np.ndarray, usable: bool) -> list[dict[str, Any]]:
    """(FPR, TPR) when flagging every bin from each public edge up; empty if no ROC-AUC."""
    if not usable:
        return []
    full = all_edges(edges)
    return [{"threshold": full[b], "fpr": s.stats["fpr.bins"][b], "tpr": s.stats["tpr.bins"][b]}
            for b in range(len(full) - 1)]


def _release_record(rel: Release) -> dict[str, Any]:
    """The mechanism, its parameters and the noisy histograms as released (safe to show)."""
    def split(counts: np.ndarray) -> dict[str, Any]:
        return {"negatives": counts[..., NEGATIVE], "positives": counts[..., POSITIVE]}

    exact = rel.noise_multiplier == 0
    return {
        "mechanism": "none: exact counts (public dataset)" if exact else "gaussian",
        "exact": exact,
        "noise_multiplier": rel.noise_multiplier,
        "l2_sensitivity": rel.l2_sensitivity,
        "noise_std": rel.noise_std,
        "bins": all_edges(rel.edges),
        "groupings": rel.labels,
        "histograms": {
            "all": split(rel.overall),
            "by_grouping": {name: {label: split(counts[g])
                                   for g, label in enumerate(rel.labels[name])}
                            for name, counts in rel.groups.items()},
        },
        "post_processing": POST_PROCESSING,
    }


def _check(y: np.ndarray, p: np.ndarray, noise_multiplier: float, n_bootstrap: int,
           thresholds: Mapping[str, float]) -> dict[str, float]:
    if y.ndim != 1 or p.shape != y.shape:
        raise ValueError(f"y_true {y.shape} and probability {p.shape} must be equal 1-d shapes")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("y_true must hold only 0 and 1")
    if not (np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()):
        raise ValueError("probability must be finite and in [0, 1]")
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise ValueError("noise_multiplier must be finite and >= 0")
    if n_bootstrap < 0:
        raise ValueError("n_bootstrap must be >= 0")
    try:
        return validate_thresholds(thresholds)
    except InvalidRequest as exc:  # the API's rule, raised here as the programming error it is
        raise ValueError("band thresholds need 0 < low_medium < medium_high < 1") from exc


def _check_groups(groups: Mapping[str, tuple[np.ndarray, Sequence[str]]],
                  n: int) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Integer codes of length n in [0, len(labels)), distinct non-empty labels and names."""
    out = {}
    for name, (codes, labels) in groups.items():
        raw, names = np.asarray(codes), [str(label) for label in labels]
        if not name or not names or len(set(names)) != len(names):
            raise ValueError(f"grouping {name!r} needs a name and distinct labels")
        if raw.shape != (n,) or (n and not np.array_equal(raw, np.round(raw))):
            raise ValueError(f"grouping {name!r}: codes must be ({n},) integers")
        code = raw.astype(np.int64)
        if n and (code.min() < 0 or code.max() >= len(names)):
            raise ValueError(f"grouping {name!r}: codes must lie in [0, {len(names)})")
        out[str(name)] = (code, names)
    return out


def evaluate(
    y_true: np.ndarray,
    probability: np.ndarray,
    *,
    groups: Mapping[str, tuple[np.ndarray, Sequence[str]]],
    noise_multiplier: float,
    band_thresholds: Mapping[str, float],
    rng: np.random.Generator,
    n_bootstrap: int = N_BOOTSTRAP,
    public_rows: int | None = None,
) -> dict[str, Any]:
    """Release the evaluation part's noisy histograms once, and derive every metric from them.

    Args:
        y_true: (n,) 0/1 outcomes of the evaluation rows.
        probability: (n,) calibrated predicted probabilities in [0, 1].
        groups: grouping -> ((n,) codes in [0, k), k public labels); an empty group is answered.
        noise_multiplier: noise std over the release's L2 sensitivity; 0 = exact (public data).
        band_thresholds: {"low_medium", "medium_high"}; the score bins follow them
            (``worker.dp_histogram.bin_edges``) and both are bin edges.
        rng: the generator of the noise and of the bootstrap (OS entropy in the worker).
        n_bootstrap: bootstrap replicates per interval (0: no intervals).
        public_rows: the evaluation part's public size (``Release.public_rows``: never the
            arrays' length, which is private where patients were left out); None: not known.

    Raises:
        ValueError: mismatched shapes, labels other than 0/1, probabilities outside [0, 1],
            a negative or non-finite noise multiplier, bad group codes, thresholds out of order.
    """
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(probability, dtype=np.float64)
    thresholds = _check(y, p, float(noise_multiplier), n_bootstrap, band_thresholds)
    checked = _check_groups(groups, len(y))
    rel = release(y.astype(np.int64), p, checked, noise_multiplier=noise_multiplier,
                  thresholds=thresholds, rng=rng, public_rows=public_rows)
    return evaluated(rel, thresholds, rng, n_bootstrap)


def evaluated(rel: Release, thresholds: Mapping[str, float], rng: np.random.Generator,
              n_bootstrap: int = N_BOOTSTRAP) -> dict[str, Any]:
    """Every metric of a released histogram set: post-processing only (also of a monitoring
    run's release, ``worker.monitoring``)."""
    overall = score(rel.overall, rel, thresholds, rng, n_bootstrap)
    grouped = {name: score(counts, rel, thresholds, rng, n_bootstrap)
               for name, counts in rel.groups.items()}
    overall = replace(overall, sizes=band_rows.of_whole_part(
        overall.stats, public_rows=rel.public_rows,
        grouping=next((s.stats for s in grouped.values()), None)))
    core, notes = _core(overall, (), thresholds)
    subgroups = []
    for name, scored in grouped.items():
        scored = replace(scored, sizes=band_rows.of_groups(overall.stats, scored.stats))
        for g, label in enumerate(rel.labels[name]):
            group_core, group_notes = _core(scored, (g,), thresholds)
            subgroups.append({"grouping": name, "group": label, **group_core,
                              "notes": group_notes})
    return json_safe({
        "split": "evaluation",
        "exact": rel.noise_multiplier == 0,
        "release": _release_record(rel),
        **core,
        "reliability": _reliability(overall, rel.edges),
        "roc_curve": _roc_curve(overall, rel.edges, core["roc_auc"] is not None),
        "band_thresholds": thresholds,
        "subgroups": subgroups,
        "ci_method": ci_method(n_bootstrap, rel.noise_multiplier),
        "ci_level": CI_LEVEL,
        "notes": notes,
        "definitions": DEFINITIONS,
    })
