"""Fairness gaps within one release: each group's metrics against its grouping's largest group.

Why: a model can rank or calibrate well overall and still fail one group; a monitoring run (or
the training-time evaluation) shows that from the same noisy histograms, so it is pure
post-processing of the release (``worker.monitoring.drift`` has the metrics and the interval).

The reference of a grouping is its largest group by (noisy, projected) rows: its metrics are the
least noisy, so each gap's interval is driven by the smaller group's noise, and the comparison
is stable (each group against the rest would change the reference with every group compared).
"""

from collections.abc import Mapping
from typing import Any

import numpy as np

from worker.evaluation import json_safe
from worker.histogram_metrics import project_nonnegative
from worker.monitoring.drift import basic_interval, parse_record, score_units, verdict

GAP_METRICS = ("roc_auc", "calibration_in_the_large", "recall_high", "precision_high")


def _gaps(labels: list[str], counts: np.ndarray, noise_std: float, edges: np.ndarray, *,
          thresholds: Mapping[str, float], rng: np.random.Generator, n_bootstrap: int,
          level: float) -> list[dict[str, Any]]:
    """The gaps of one grouping: counts (groups, n_bins, 2) as released."""
    ref = int(np.argmax(project_nonnegative(counts).sum(axis=(-2, -1))))
    scored = score_units(counts, noise_std, edges, thresholds, rng, n_bootstrap)
    out = []
    for metric in GAP_METRICS:
        point, boot = scored.estimate[metric], scored.boot[metric]
        gap = point - point[ref]
        low, high = basic_interval(gap, boot - boot[:, ref:ref + 1], level)
        for g, label in enumerate(labels):
            if g == ref:
                continue
            out.append({"group": label, "reference_group": labels[ref], "metric": metric,
                        "gap": gap[g], "gap_ci": None if np.isnan(low[g]) else [low[g], high[g]],
                        "verdict": verdict(low[g], high[g],
                                           labels=("gap", "gap", "no_gap", "inconclusive"))})
    return out


def fairness_gaps(release_record: dict[str, Any], *, thresholds: Mapping[str, float],
                  rng: np.random.Generator, n_bootstrap: int = 1000,
                  level: float = 0.95) -> list[dict[str, Any]]:
    """Every group's gap (group minus its grouping's largest group) in ROC-AUC,
    calibration-in-the-large, and recall and precision of the high band, with intervals.

    Metrics and noise floors as ``worker.monitoring.drift.performance_drift`` (a metric below
    either group's floor gives gap None, verdict "inconclusive"); the interval is a basic
    parametric bootstrap interval over the release. Verdict: "no_gap" when the interval lies
    within +-``NO_CHANGE_TOLERANCE``, "gap" when it excludes 0, "inconclusive" otherwise.

    Args:
        release_record: a release record as stored (training-time: ``metrics["release"]``).
        thresholds: the model's band cut-offs (the high band starts at ``medium_high``).
        rng: the bootstrap's generator.
        n_bootstrap: replicates (>= 1).
        level: the intervals' two-sided coverage.

    Returns:
        One {"grouping", "group", "reference_group", "metric", "gap", "gap_ci", "verdict"} per
        grouping, non-reference group and metric; empty when the record has no grouping.

    Raises:
        ValueError: n_bootstrap < 1 or level outside (0, 1), or a malformed record.
    """
    if n_bootstrap < 1 or not 0 < level < 1:
        raise ValueError("n_bootstrap must be >= 1 and level in (0, 1)")
    record = parse_record(release_record)
    groupings: dict[str, list[str]] = {}
    for grouping, group in record.units:
        if grouping:
            groupings.setdefault(grouping, []).append(group)
    out = []
    for grouping, labels in groupings.items():
        if len(labels) < 2:
            continue
        counts = np.stack([record.units[(grouping, label)] for label in labels])
        out += [{"grouping": grouping, **gap}
                for gap in _gaps(labels, counts, record.noise_std, record.edges,
                                 thresholds=thresholds, rng=rng, n_bootstrap=n_bootstrap,
                                 level=level)]
    return json_safe(out)
