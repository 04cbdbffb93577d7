"""The monitoring page's charts: calibration at training time against the latest run, feature
drift (PSI per feature with its interval) and the ROC-AUC of each run.

Every figure is post-processing of released values only: the noisy counts of the model's
training-time evaluation and of a run's evaluation, and the PSI and ROC-AUC intervals the runs
stored. Charts are ``app.reports.svg_plot`` charts like the other report pages'; each one's data
is in a table on the page (the reliability table here, the runs' and the features' tables in
``app.reports.monitoring_html``), and a verdict is said in words (legend, table), never by
colour alone.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from app.jobs.models import JobStatus
from app.monitoring.schemas import FeatureDriftOut, MonitoringRunOut, MonitoringTimeline
from app.reports.html import MISSING, chart_svg, finite, num, table
from app.reports.svg_plot import PALETTE, Chart, Marker, Reference, Series

CHANCE = "#777777"
INCONCLUSIVE = "#555555"
# verdict -> (words, colour, marker): the shape and the words tell them apart, not the colour.
VERDICTS: dict[str, tuple[str, str, Marker]] = {
    "drift": ("drift", PALETTE[1], "triangle"),
    "no_drift": ("no drift", PALETTE[0], "circle"),
    "inconclusive": ("inconclusive", INCONCLUSIVE, "square"),
}
SKIPPED = "skipped: noisy rows ≤ 0"


def _interval(ci: Any) -> tuple[float, float] | None:
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(finite(v) for v in ci):
        return float(ci[0]), float(ci[1])
    return None


# --- reliability ----------------------------------------------------------------------------

def reliability_bins(curve: Sequence[Any] | None) -> list[dict[str, Any]]:
    """Stored reliability bins as dicts (the training-time ones arrive typed)."""
    return [b.model_dump() if isinstance(b, BaseModel) else b for b in curve or []
            if isinstance(b, dict | BaseModel)]


def observed_rate(bin_: Mapping[str, Any]) -> float | None:
    """Noisy positives over noisy rows, clipped to [0, 1]: post-processing of the released
    counts. None where the noisy rows are not positive (noise can make them so) or a count is
    missing: such a bin has no rate to show."""
    rows, positives = bin_.get("rows"), bin_.get("positives")
    if not (finite(rows) and finite(positives)) or rows <= 0:
        return None
    return min(1.0, max(0.0, positives / rows))


def reliability_points(curve: Sequence[Any] | None) -> list[tuple[float, float]]:
    """(bin midpoint, observed rate) of every bin with a rate, in bin order."""
    return [(float(b["p_representative"]), rate) for b in reliability_bins(curve)
            if finite(b.get("p_representative")) and (rate := observed_rate(b)) is not None]


def reliability_chart(training: Sequence[Any] | None, follow_up: Sequence[Any] | None,
                      run_id: int, outcome: str) -> Chart:
    """Both sides' observed rate against the bin midpoint, with perfect calibration."""
    sides = reliability_points(training), reliability_points(follow_up)
    top = max((v for points in sides for p in points for v in p), default=1.0)
    return Chart(
        chart_id="reliability",
        title=f"Reliability at training time and on run {run_id} (DP, binned)",
        description=f"Observed rate of the outcome ({outcome}) in each fixed public probability "
        "bin against the bin's midpoint: circles and a solid line for the model's training-time "
        f"evaluation, squares and a dashed line for the follow-up of run {run_id}; dotted: "
        "perfect calibration. Rates are noisy positives over noisy rows, clipped to 0 to 1; a "
        "bin whose noisy rows are 0 or fewer is left out.",
        x_label="predicted probability (bin midpoint)",
        y_label="observed rate",
        series=[
            Series("perfect calibration", [(0.0, 0.0), (top, top)], color=CHANCE, dash="3 3",
                   marker="none"),
            Series("training-time evaluation", sides[0], color=PALETTE[0]),
            Series(f"follow-up, run {run_id}", sides[1], color=PALETTE[1], dash="6 4",
                   marker="square"),
        ],
        empty_message="No bin with positive noisy rows",
    )


def _side_cells(bin_: Mapping[str, Any] | None) -> list[str]:
    if bin_ is None:
        return [MISSING] * 3
    rate = observed_rate(bin_)
    return [num(bin_.get("rows"), ".1f"), num(bin_.get("positives"), ".1f"),
            SKIPPED if rate is None else num(rate, ".3f")]


def reliability_table(training: Sequence[Any] | None, follow_up: Sequence[Any] | None,
                      run_id: int) -> dict[str, Any]:
    """Both sides per public bin (the chart's data, the skipped bins said in words)."""
    by_side = [{(b.get("p_from"), b.get("p_to")): b for b in reliability_bins(curve)}
               for curve in (training, follow_up)]
    keys = sorted(by_side[0].keys() | by_side[1].keys(),
                  key=lambda k: k[0] if finite(k[0]) else -1.0)
    rows = []
    for key in keys:
        train, follow = by_side[0].get(key), by_side[1].get(key)
        midpoint = (train or follow or {}).get("p_representative")
        rows.append([f"{num(key[0], 'g')} to {num(key[1], 'g')}", num(midpoint, "g"),
                     *_side_cells(train), *_side_cells(follow)])
    headers = [("Probability bin", False), ("Midpoint", True), ("Training rows", True),
               ("Training positives", True), ("Training rate", True),
               (f"Run {run_id} rows", True), (f"Run {run_id} positives", True),
               (f"Run {run_id} rate", True)]
    return table("Reliability by public bin, training time and follow-up (noisy counts; data "
                 "of the plot above)", headers, rows)


def reliability_figure(timeline: MonitoringTimeline,
                       run: MonitoringRunOut | None) -> dict[str, Any] | None:
    """The chart, its caption and its table; None without a finished run's reliability."""
    follow_up = (run.performance or {}).get("reliability") if run is not None else None
    if run is None or not reliability_bins(follow_up):
        return None
    training = timeline.training_reliability
    return {"svg": chart_svg(reliability_chart(training, follow_up, run.id, timeline.outcome)),
            "caption": f"Observed rate per fixed probability bin at training time (solid) and "
            f"on the follow-up of run {run.id} (dashed); dotted: perfect calibration.",
            "table": reliability_table(training, follow_up, run.id)}


# --- feature drift --------------------------------------------------------------------------

def psi_order(features: Sequence[FeatureDriftOut]) -> list[FeatureDriftOut]:
    """The features with a PSI, largest first (features without one have no reference)."""
    return sorted((f for f in features if finite(f.psi)), key=lambda f: -float(f.psi or 0.0))


def drift_chart(run: MonitoringRunOut) -> Chart:
    """PSI per feature by rank with its 95% interval as a whisker; one legend entry per
    feature names it and its verdict."""
    ranked = psi_order(run.features)
    series = []
    for rank, feature in enumerate(ranked, start=1):
        words, color, marker = VERDICTS.get(feature.verdict,
                                            (feature.verdict, INCONCLUSIVE, "square"))
        label = f"{rank} {feature.name}: {words}"
        if (ci := _interval(feature.psi_ci)) is not None:
            series.append(Series(f"{label}, 95% interval", [(rank, ci[0]), (rank, ci[1])],
                                 color=color, marker="none", legend=False))
        series.append(Series(label, [(rank, feature.psi)], color=color, marker=marker))
    return Chart(
        chart_id="feature-drift",
        title=f"Feature drift of run {run.id}: PSI by feature, largest first",
        description="Population stability index of each feature's noisy follow-up histogram "
        "against the training cohort's (the reference release), with its 95% interval as a "
        "vertical line; features ranked by PSI, each named with its verdict (drift, no drift "
        "or inconclusive) in the legend: triangle drift, circle no drift, square inconclusive.",
        x_label="feature, by PSI rank (1 = largest; names in the legend)",
        y_label="PSI",
        series=series,
        x_domain=(0.5, len(ranked) + 0.5),
        x_integer=True,
        empty_message="No feature has a PSI (no reference release)",
    )


def drift_figure(run: MonitoringRunOut | None) -> dict[str, Any] | None:
    if run is None or not psi_order(run.features):
        return None
    return {"svg": chart_svg(drift_chart(run)),
            "caption": "PSI per feature with its 95% interval, largest first; the verdict is in "
            "the legend and in the table below (triangle: drift, circle: no drift, square: "
            "inconclusive)."}


# --- ROC-AUC over runs ----------------------------------------------------------------------

def finished(runs: Sequence[MonitoringRunOut]) -> list[MonitoringRunOut]:
    return [run for run in runs if run.status == JobStatus.SUCCEEDED]


def _training_auc(runs: Sequence[MonitoringRunOut]) -> float | None:
    """The training-time ROC-AUC as the latest run's drift recomputed it from that release."""
    for run in reversed(runs):
        drift = ((run.performance or {}).get("drift") or {}).get("overall") or {}
        value = (drift.get("roc_auc") or {}).get("reference")
        if finite(value):
            return float(value)
    return None


def auc_chart(runs: Sequence[MonitoringRunOut]) -> Chart:
    """One point per finished run (x: its id) with its interval as a whisker."""
    series = [Series("ROC-AUC on the follow-up", [(r.id, r.roc_auc) for r in runs])]
    whiskers = [(r.id, ci) for r in runs if (ci := _interval(r.roc_auc_ci)) is not None]
    for index, (run_id, (low, high)) in enumerate(whiskers):
        series.append(Series("95% interval", [(run_id, low), (run_id, high)], color=PALETTE[0],
                             marker="none", legend=index == 0))
    references = [Reference("chance (0.5)", 0.5, color=CHANCE, dash="3 3")]
    if (training := _training_auc(runs)) is not None:
        references.append(Reference("training-time ROC-AUC", training))
    ids = [r.id for r in runs]
    return Chart(
        chart_id="auc-timeline",
        title="ROC-AUC of each finished monitoring run, oldest first",
        description="ROC-AUC of the model on each run's follow-up (noisy, binned scores) with "
        "its 95% interval as a vertical line, against the run's id; dashed: the training-time "
        "ROC-AUC; dotted: chance.",
        x_label="monitoring run (id)",
        y_label="ROC-AUC",
        series=series,
        references=references,
        x_domain=(min(ids) - 0.5, max(ids) + 0.5),
        y_domain=(0.0, 1.0),
        x_integer=True,
        empty_message="No run has a ROC-AUC (too few noisy positives or negatives)",
    )


def auc_figure(timeline: MonitoringTimeline) -> dict[str, Any] | None:
    """The AUC timeline once two runs have finished (one point is no timeline)."""
    runs = finished(timeline.runs)
    if len(runs) < 2:
        return None
    return {"svg": chart_svg(auc_chart(runs)),
            "caption": "ROC-AUC of each finished run with its 95% interval; the table above "
            "has the same values."}
