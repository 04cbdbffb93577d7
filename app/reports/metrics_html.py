"""The held-out metrics section of a job's report page: the DP evaluation release and what was
computed from it, as tables and inline SVG charts.

The worker stores the evaluation (``worker.evaluation``) as one Gaussian release of binned counts
plus its post-processing; this module turns that stored JSON into plain values for the job
template. Every datum in a chart is also in a table. Metrics stored by an older worker, or shapes
not recognised, degrade to what is recognised.
"""

from typing import Any

from app.reports.html import MISSING, chart_svg, finite, num, table
from app.reports.svg_plot import PALETTE, Chart, Series

CHANCE = "#777777"
HEADLINE = (
    ("rows", "evaluation rows (noisy count)"),
    ("positives", "positives: {outcome} (noisy count)"),
    ("prevalence", "prevalence"),
    ("roc_auc", "ROC-AUC (scores binned)"),
    ("pr_auc", "PR-AUC (average precision, scores binned)"),
    ("brier", "Brier score (binned forecast)"),
    ("brier_baseline", "Brier score of predicting the prevalence"),
)


def with_ci(values: dict[str, Any], key: str, fmt: str = ".4g") -> str:
    """A metric with its interval when one is stored beside it as ``<key>_ci``."""
    shown = num(values.get(key), fmt)
    ci = values.get(f"{key}_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(finite(v) for v in ci):
        shown += f" [{num(ci[0], fmt)}, {num(ci[1], fmt)}]"
    return shown


def _release_table(release: dict[str, Any]) -> dict[str, Any]:
    """The mechanism and its public parameters."""
    bins = release.get("bins") or []
    groupings = release.get("groupings") or {}
    rows = [
        ["Mechanism", str(release.get("mechanism", MISSING))],
        ["Noise multiplier σ", num(release.get("noise_multiplier"))],
        ["L2 sensitivity", num(release.get("l2_sensitivity"))],
        ["Noise std per count", num(release.get("noise_std"))],
        ["Score bins (public edges)", ", ".join(num(e, "g") for e in bins) or MISSING],
        ["Groupings", "; ".join(f"{name}: {', '.join(str(x) for x in labels)}"
                                for name, labels in groupings.items()) or "none"],
    ]
    return table("The evaluation release (one Gaussian mechanism; every figure below is "
                 "computed from its noisy counts)", [("Parameter", False), ("Value", False)], rows)


def _headline_table(metrics: dict[str, Any], outcome: str) -> dict[str, Any]:
    rows = [[label.format(outcome=outcome), with_ci(metrics, key)]
            for key, label in HEADLINE if key in metrics]
    return table("Held-out metrics (95% interval, noise included, where computed)",
                 [("Metric", False), ("Value", True)], rows)


def _bands_table(bands: dict[str, Any]) -> dict[str, Any]:
    rows = [
        [name, f"{num(b.get('p_from'), '.3g')} to {num(b.get('p_to'), '.3g')}",
         num(view.get("rows"), ".1f"), num(view.get("positives"), ".1f"),
         with_ci(view, "precision"), with_ci(view, "recall")]
        for name, b in bands.items()
        if isinstance(b, dict) and isinstance(view := b.get("at_or_above"), dict)
    ]
    headers = [("Band (this or higher)", False), ("Probability", False), ("Rows", True),
               ("Positives", True), ("Precision", True), ("Recall", True)]
    return table("Risk bands on the evaluation rows", headers, rows)


def _reliability_rows(curve: list[Any]) -> list[dict[str, Any]]:
    return [b for b in curve if isinstance(b, dict)]


def reliability_chart(curve: list[Any], outcome: str) -> Chart:
    """Observed rate against each public bin's midpoint, its interval, and the diagonal."""
    bins = _reliability_rows(curve)
    observed = [(b.get("p_representative"), b.get("observed_rate")) for b in bins]
    ci = [(b.get("p_representative"), b.get("observed_ci")) for b in bins]
    low = [(x, c[0]) for x, c in ci if isinstance(c, list) and len(c) == 2]
    high = [(x, c[1]) for x, c in ci if isinstance(c, list) and len(c) == 2]
    xs = [x for x, y in observed if finite(x) and finite(y)]
    top = max(xs, default=1.0)
    return Chart(
        chart_id="reliability",
        title="Reliability of the probabilities (DP, binned)",
        description=f"Observed rate of the outcome ({outcome}) in each fixed public probability "
        "bin, against the bin's midpoint, from the noisy counts; dashed: 95% interval; dotted: "
        "perfect calibration.",
        x_label="predicted probability (bin midpoint)",
        y_label="observed rate",
        series=[
            Series("perfect calibration", [(0.0, 0.0), (top, top)], color=CHANCE, dash="3 3",
                   marker="none"),
            Series("observed rate", observed, color=PALETTE[0]),
            Series("95% interval, low", low, color=PALETTE[1], dash="6 4", marker="none"),
            Series("95% interval, high", high, color=PALETTE[1], dash="6 4", marker="none"),
        ],
        empty_message="Too few rows in every bin",
    )


def _reliability_table(curve: list[Any]) -> dict[str, Any]:
    rows = [
        [f"{num(b.get('p_from'), 'g')} to {num(b.get('p_to'), 'g')}",
         num(b.get("p_representative"), "g"), num(b.get("rows"), ".1f"),
         num(b.get("positives"), ".1f"), _rate(b)]
        for b in _reliability_rows(curve)
    ]
    headers = [("Probability bin", False), ("Midpoint", True), ("Rows", True),
               ("Positives", True), ("Observed rate [95% interval]", True)]
    return table("Reliability by public bin (data of the plot above)", headers, rows)


def _rate(b: dict[str, Any]) -> str:
    rate, ci = num(b.get("observed_rate"), ".3g"), b.get("observed_ci")
    if isinstance(ci, list) and len(ci) == 2 and all(finite(v) for v in ci):
        rate += f" [{num(ci[0], '.3g')}, {num(ci[1], '.3g')}]"
    return rate


def roc_chart(points: list[Any], auc: Any) -> Chart:
    """The binned ROC curve (one point per public bin edge) with chance."""
    curve = [(p.get("fpr"), p.get("tpr")) for p in points if isinstance(p, dict)]
    drawn = [(0.0, 0.0), *curve] if curve else []
    return Chart(
        chart_id="roc-curve",
        title=f"ROC curve of the binned scores (AUC {num(auc, '.3f')})",
        description="True-positive against false-positive rate when flagging every row at or "
        "above each public bin edge, from the noisy counts; dotted: chance.",
        x_label="false-positive rate",
        y_label="true-positive rate",
        series=[
            Series("chance", [(0.0, 0.0), (1.0, 1.0)], color=CHANCE, dash="3 3", marker="none"),
            Series("model", drawn, color=PALETTE[0]),
        ],
        x_domain=(0.0, 1.0),
        y_domain=(0.0, 1.0),
        empty_message="Too few noisy positives or negatives for a ROC curve",
    )


def _roc_table(points: list[Any]) -> dict[str, Any]:
    rows = [[num(p.get("threshold"), "g"), num(p.get("fpr"), ".3f"), num(p.get("tpr"), ".3f")]
            for p in points if isinstance(p, dict)]
    return table("ROC curve (data of the plot above)",
                 [("Flag from p ≥", True), ("False-positive rate", True),
                  ("True-positive rate", True)], rows)


def _subgroups_table(subgroups: list[Any]) -> dict[str, Any]:
    rows = [
        [f"{g.get('grouping', g.get('feature', ''))} {g.get('group', '')}",
         num(g.get("rows"), ".1f"), num(g.get("positives"), ".1f"), with_ci(g, "roc_auc"),
         with_ci(g, "pr_auc"), with_ci(g, "brier")]
        for g in subgroups
        if isinstance(g, dict)
    ]
    headers = [("Subgroup", False), ("Rows", True), ("Positives", True), ("ROC-AUC", True),
               ("PR-AUC", True), ("Brier", True)]
    return table("Held-out metrics by subgroup (noisy counts)", headers, rows)


def _block(table_: dict[str, Any] | None = None, chart: Chart | None = None,
           caption: str = "") -> dict[str, Any]:
    """One item of the section, in order: a table, or a chart with its caption."""
    return {"table": table_, "svg": chart_svg(chart) if chart else None, "caption": caption}


def metrics_section(metrics: dict[str, Any], *, outcome: str) -> dict[str, Any]:
    """The stored metrics as ordered blocks and notes for ``job.html``; ``outcome`` names what
    the positives are (the model card's outcome, from the model's schema)."""
    blocks = []
    release = metrics.get("release")
    if isinstance(release, dict):
        blocks.append(_block(_release_table(release)))
    blocks.append(_block(_headline_table(metrics, outcome)))
    if isinstance(bands := metrics.get("bands"), dict):
        blocks.append(_block(_bands_table(bands)))
    if isinstance(curve := metrics.get("reliability"), list) and curve:
        blocks.append(_block(chart=reliability_chart(curve, outcome),
                             caption="Observed rate per fixed probability bin; dotted: perfect "
                             "calibration."))
        blocks.append(_block(_reliability_table(curve)))
    if isinstance(points := metrics.get("roc_curve"), list) and points:
        blocks.append(_block(chart=roc_chart(points, metrics.get("roc_auc")),
                             caption="ROC curve of the binned scores; dotted: chance."))
        blocks.append(_block(_roc_table(points)))
    if isinstance(subgroups := metrics.get("subgroups"), list) and subgroups:
        blocks.append(_block(_subgroups_table(subgroups)))
    notes = [n for n in metrics.get("notes") or [] if isinstance(n, str)]
    method = [f"{k}: {metrics[k]}" for k in ("ci_method",) if isinstance(metrics.get(k), str)]
    if isinstance(release, dict) and isinstance(release.get("post_processing"), str):
        method.append(f"post-processing: {release['post_processing']}")
    return {"blocks": blocks, "notes": [*method, *notes]}
