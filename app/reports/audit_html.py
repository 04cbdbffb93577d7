"""The privacy-audit report as a self-contained page, with the rules of the ledger's pages.

No script, no external resource, the ledger pages' style and Content-Security-Policy; the ROC
plot is inline SVG and its data are repeated in a table. An alarm is shown in red (and in
words, for readers who cannot tell red apart). The markup is in the template ``audit.html``;
this module prepares plain values for it from the report model, which the template escapes
(``app.reports.html``).
"""

from typing import Any

import numpy as np

from app.reports.audit_schemas import AuditReport
from app.reports.html import MISSING, Link, chart_svg, num, render, table
from app.reports.svg_plot import PALETTE, Chart, Series

CURVES = (
    ("dp", "lira", "DP model, LiRA", PALETTE[0], ""),
    ("dp", "loss", "DP model, loss threshold", PALETTE[2], "2 3"),
    ("non_private", "lira", "non-private model, LiRA", PALETTE[1], "6 4"),
    ("non_private", "loss", "non-private model, loss threshold", PALETTE[3], "8 3 2 3"),
)
TABLE_FPRS = (0.001, 0.01, 0.1, 0.5)
CHANCE = "#8a8a8a"


def roc_chart(report: AuditReport) -> Chart:
    """ROC curves of both attacks on the DP and the non-private model, with chance."""
    membership = report.membership or {}
    series = [Series("chance (AUC 0.5)", [(0.0, 0.0), (1.0, 1.0)], color=CHANCE, dash="3 3",
                     marker="none")]
    for model, attack, label, color, dash in CURVES:
        curve = ((membership.get(model) or {}).get(attack) or {}).get("roc") or []
        series.append(Series(label, [tuple(p) for p in curve], color=color, dash=dash,
                             marker="none"))
    return Chart(
        chart_id="attack-roc",
        title=f"Membership-inference ROC, audit {report.audit_id}",
        description="True-positive against false-positive rate of the loss-threshold and LiRA "
        "attacks on the DP model and on a non-private model trained on the same rows.",
        x_label="false-positive rate", y_label="true-positive rate",
        series=series, x_domain=(0.0, 1.0), y_domain=(0.0, 1.0),
        empty_message="The audit has not run yet",
    )


def _headline(report: AuditReport) -> dict[str, str]:
    eps = report.epsilon
    return {
        "accounted": "∞ (non-private)" if eps.non_private else eps.accounted_text,
        "audited": eps.audited_text if eps.audited_text is not None else MISSING,
        "delta": num(eps.delta, "g"),
        "confidence": f"{eps.confidence:.0%}",
    }


def _one_run_table(report: AuditReport) -> dict[str, Any]:
    parts = report.one_run or {}
    rows = [
        [name.replace("_", "-"), num(p.get("canaries")), num(p.get("included")),
         f"{num(p.get('k_plus'))} / {num(p.get('k_minus'))}", num(p.get("correct")),
         num(p.get("tests")), num(p.get("epsilon"), ".3g"),
         num(p.get("measured_noise_multiplier")), num(p.get("claimed_noise_multiplier"))]
        for name, p in parts.items()
    ]
    headers = [("Auditor", False), ("Canaries m", True), ("Included", True),
               ("Guesses in / out", True), ("Correct", True), ("Guess grid (union bound)", True),
               ("ε lower bound", True), ("σ measured", True), ("σ claimed", True)]
    return table("One-run audits (Steinke, Nasr and Jagielski 2023)", headers, rows)


def _attack_table(report: AuditReport) -> dict[str, Any]:
    membership = report.membership or {}
    rows = []
    for model, attack, label, _, _ in CURVES:
        s = (membership.get(model) or {}).get(attack) or {}
        rows.append([label, num(s.get("roc_auc"), ".3f"),
                     num(s.get("tpr_at_1pct_fpr"), ".3f"), num(s.get("tpr_at_0_1pct_fpr"), ".3f"),
                     num(s.get("advantage"), ".3f")])
    headers = [("Model and attack", False), ("ROC-AUC", True), ("TPR at 1% FPR", True),
               ("TPR at 0.1% FPR", True), ("Advantage", True)]
    return table("Attack success: members against non-members", headers, rows)


def _roc_table(report: AuditReport) -> dict[str, Any]:
    """The plot's data at a few false-positive rates (best TPR at or below each)."""
    membership = report.membership or {}
    rows = []
    for model, attack, label, _, _ in CURVES:
        curve = np.asarray(((membership.get(model) or {}).get(attack) or {}).get("roc") or [])
        cells = [MISSING] * len(TABLE_FPRS)
        if len(curve):
            cells = [num(float(curve[curve[:, 0] <= f + 1e-12, 1].max()), ".3f")
                     for f in TABLE_FPRS]
        rows.append([label, *cells])
    headers = [("Curve", False), *((f"TPR at FPR ≤ {f:g}", True) for f in TABLE_FPRS)]
    return table("ROC curves at selected false-positive rates (data of the plot above)",
                  headers, rows)


def _audit_facts(report: AuditReport) -> list[tuple[str, str | Link]]:
    links = report.links
    membership = report.membership or {}
    return [
        ("Audited job", Link(links.audited_job_report, f"job {report.audited_job_id}")),
        ("Dataset", Link(links.dataset_report,
                         f"{report.dataset_name} (id {report.dataset_id})")),
        ("Status", report.status),
        ("Privacy unit", report.privacy_unit),
        ("Shadow models", num(membership.get("shadow_models"))),
        ("Members / non-members scored",
         f"{num(membership.get('members'))} / {num(membership.get('non_members'))}"),
        ("Seconds", num((report.seconds or {}).get("total"), ".1f")),
    ]


def render_audit_page(report: AuditReport) -> str:
    """The audit report as a complete HTML5 document (template ``audit.html``)."""
    error = report.error
    return render(
        "audit.html",
        title=f"Privacy audit {report.audit_id}",
        report=report,
        headline=_headline(report),
        error=f"{error.code or ''}: {error.message or ''}" if error else None,
        audit_facts=_audit_facts(report),
        one_run_table=_one_run_table(report),
        attack_table=_attack_table(report),
        plot=chart_svg(roc_chart(report)),
        roc_table=_roc_table(report),
    )
