"""The privacy-audit report as a self-contained page, with the rules of the ledger's pages.

No script, no external resource, the ledger pages' style and Content-Security-Policy; the ROC
plot is inline SVG and its data are repeated in a table. An alarm is shown in red (and in
words, for readers who cannot tell red apart).
"""

from html import escape
from typing import Any

import numpy as np

from app.reports.html import MISSING, facts, figure, link, note, num, page, table
from app.reports.svg_plot import PALETTE, Chart, Series

CURVES = (
    ("dp", "lira", "DP model, LiRA", PALETTE[0], ""),
    ("dp", "loss", "DP model, loss threshold", PALETTE[2], "2 3"),
    ("non_private", "lira", "non-private model, LiRA", PALETTE[1], "6 4"),
    ("non_private", "loss", "non-private model, loss threshold", PALETTE[3], "8 3 2 3"),
)
TABLE_FPRS = (0.001, 0.01, 0.1, 0.5)
CHANCE = "#8a8a8a"
AUDITORS_NOTE = (
    "The white-box auditor injects gradient canaries into the engine and reads the noisy "
    "updates (the strongest auditor); the black-box one adds canary records and sees only the "
    "final model. Both bounds hold together at the stated confidence."
)


def roc_chart(report: dict[str, Any]) -> Chart:
    """ROC curves of both attacks on the DP and the non-private model, with chance."""
    membership = report.get("membership") or {}
    series = [Series("chance (AUC 0.5)", [(0.0, 0.0), (1.0, 1.0)], color=CHANCE, dash="3 3",
                     marker="none")]
    for model, attack, label, color, dash in CURVES:
        curve = ((membership.get(model) or {}).get(attack) or {}).get("roc") or []
        series.append(Series(label, [tuple(p) for p in curve], color=color, dash=dash,
                             marker="none"))
    return Chart(
        chart_id="attack-roc",
        title=f"Membership-inference ROC, audit {report['audit_id']}",
        description="True-positive against false-positive rate of the loss-threshold and LiRA "
        "attacks on the DP model and on a non-private model trained on the same rows.",
        x_label="false-positive rate", y_label="true-positive rate",
        series=series, x_domain=(0.0, 1.0), y_domain=(0.0, 1.0),
        empty_message="The audit has not run yet",
    )


def _headline(report: dict[str, Any]) -> str:
    eps = report["epsilon"]
    accounted = "∞ (non-private)" if eps["non_private"] else escape(eps["accounted_text"])
    audited = escape(eps["audited_text"]) if eps["audited_text"] is not None else MISSING
    body = (
        f'<p class="big">accounted ε ≤ {accounted} · audited ε ≥ {audited}</p>'
        f"<p>δ = {num(eps['delta'], 'g')}; accounted: PRV accountant (upper bound); audited: "
        f"one-run lower bound at {eps['confidence']:.0%} confidence.</p>"
    )
    if report["alarm"]:
        return (
            '<section class="summary alarm" role="alert" aria-label="Privacy bug">'
            "<p class=\"big\">PRIVACY BUG DETECTED: the audited lower bound exceeds the "
            f"accounted epsilon.</p>{body}</section>"
        )
    return f'<section class="summary" aria-label="Epsilons">{body}</section>'


def _one_run_table(report: dict[str, Any]) -> str:
    parts = report.get("one_run") or {}
    rows = [
        [escape(name.replace("_", "-")), num(p.get("canaries")), num(p.get("included")),
         f"{num(p.get('k_plus'))} / {num(p.get('k_minus'))}", num(p.get("correct")),
         num(p.get("tests")), num(p.get("epsilon"), ".3g"),
         num(p.get("measured_noise_multiplier")), num(p.get("claimed_noise_multiplier"))]
        for name, p in parts.items()
    ]
    headers = [("Auditor", False), ("Canaries m", True), ("Included", True),
               ("Guesses in / out", True), ("Correct", True), ("Guess grid (union bound)", True),
               ("ε lower bound", True), ("σ measured", True), ("σ claimed", True)]
    return table("One-run audits (Steinke, Nasr and Jagielski 2023)", headers, rows)


def _attack_table(report: dict[str, Any]) -> str:
    membership = report.get("membership") or {}
    rows = []
    for model, attack, label, _, _ in CURVES:
        s = (membership.get(model) or {}).get(attack) or {}
        rows.append([escape(label), num(s.get("roc_auc"), ".3f"),
                     num(s.get("tpr_at_1pct_fpr"), ".3f"), num(s.get("tpr_at_0_1pct_fpr"), ".3f"),
                     num(s.get("advantage"), ".3f")])
    headers = [("Model and attack", False), ("ROC-AUC", True), ("TPR at 1% FPR", True),
               ("TPR at 0.1% FPR", True), ("Advantage", True)]
    return table("Attack success: members against non-members", headers, rows)


def _roc_table(report: dict[str, Any]) -> str:
    """The plot's data at a few false-positive rates (best TPR at or below each)."""
    membership = report.get("membership") or {}
    rows = []
    for model, attack, label, _, _ in CURVES:
        curve = np.asarray(((membership.get(model) or {}).get(attack) or {}).get("roc") or [])
        cells = [MISSING] * len(TABLE_FPRS)
        if len(curve):
            cells = [num(float(curve[curve[:, 0] <= f + 1e-12, 1].max()), ".3f")
                     for f in TABLE_FPRS]
        rows.append([escape(label), *cells])
    headers = [("Curve", False), *((f"TPR at FPR ≤ {f:g}", True) for f in TABLE_FPRS)]
    return table("ROC curves at selected false-positive rates (data of the plot above)",
                  headers, rows)


def render_audit_page(report: dict[str, Any]) -> str:
    """The audit report as a complete HTML5 document."""
    audit_id, links = report["audit_id"], report["links"]
    membership = report.get("membership") or {}
    audit_facts = facts([
        ("Audited job", link(links["audited_job_report"], f"job {report['audited_job_id']}")),
        ("Dataset", link(links["dataset_report"],
                          f"{report['dataset_name']} (id {report['dataset_id']})")),
        ("Status", escape(report["status"])),
        ("Privacy unit", escape(report["privacy_unit"])),
        ("Shadow models", num(membership.get("shadow_models"))),
        ("Members / non-members scored",
         f"{num(membership.get('members'))} / {num(membership.get('non_members'))}"),
        ("Seconds", num((report.get("seconds") or {}).get("total"), ".1f")),
    ])
    error = report.get("error") or {}
    error_html = (
        f'<p class="alarm">{escape(error.get("code") or "")}: {escape(error.get("message") or "")}'
        "</p>" if error else ""
    )
    body = (
        f"<header><h1>Privacy audit {audit_id}</h1><p class=\"sub\">Audit of job "
        f"{escape(str(report['audited_job_id']))}'s mechanism, with its exact settings</p>"
        f"</header>\n<main>{_headline(report)}{error_html}"
        f'<section id="statement"><h2>Statement</h2><p>{escape(report["statement"])}</p>'
        f"{note(report['ledger'])}</section>"
        f'<section id="audit"><h2>Audit</h2>{audit_facts}{_one_run_table(report)}'
        f"{note(AUDITORS_NOTE)}"
        "</section>"
        f'<section id="attacks"><h2>Membership inference</h2>{_attack_table(report)}'
        f"{figure(roc_chart(report), 'ROC curves; the dotted diagonal is chance.')}"
        f"{_roc_table(report)}</section></main>"
    )
    return page(f"Privacy audit {audit_id}", body)
