"""A model's monitoring timeline as a self-contained page, with the rules of the ledger's pages.

No script, no external resource, the ledger pages' style and Content-Security-Policy. The
markup is in the template ``monitoring.html``; this module prepares plain values for it from
the timeline (``app.monitoring.schemas.MonitoringTimeline``), which the template escapes.
"""

from typing import Any

from app.monitoring.schemas import MonitoringRunOut, MonitoringTimeline
from app.reports.html import MISSING, num, render, table
from app.reports.monitoring_plots import auc_figure, drift_figure, finished, reliability_figure


def _ci(ci: list[float] | None) -> str:
    return MISSING if not ci else f"[{num(ci[0], '.3f')}, {num(ci[1], '.3f')}]"


def _verdict(run: MonitoringRunOut, metric: str) -> str:
    drift = ((run.performance or {}).get("drift") or {}).get("overall") or {}
    return str((drift.get(metric) or {}).get("verdict", MISSING))


def timeline_table(timeline: MonitoringTimeline) -> dict[str, Any]:
    rows = [[str(run.id), str(run.period.start) if run.period else MISSING,
             str(run.period.end) if run.period else MISSING, str(run.status),
             num(run.roc_auc, ".3f") if run.roc_auc is not None else MISSING,
             _ci(run.roc_auc_ci), _verdict(run, "roc_auc"),
             str(sum(f.verdict == "drift" for f in run.features))]
            for run in timeline.runs]
    return table("Monitoring runs, oldest first",
                 [("run", True), ("period from", False), ("period to", False),
                  ("status", False), ("ROC-AUC", True), ("95% interval", False),
                  ("AUC change", False), ("features drifted", True)], rows)


def feature_table(run: MonitoringRunOut) -> dict[str, Any]:
    rows = [[f.name, num(f.psi, ".4f") if f.psi is not None else MISSING, _ci(f.psi_ci),
             num(f.wasserstein, ".3g") if f.wasserstein is not None else MISSING,
             _ci(f.wasserstein_ci), f.verdict] for f in run.features]
    return table(f"Feature drift of run {run.id}, largest PSI first",
                 [("feature", False), ("PSI", True), ("PSI 95% interval", False),
                  ("Wasserstein", True), ("Wasserstein 95% interval", False),
                  ("verdict", False)], rows, alarms=[f.verdict == "drift" for f in run.features])


def render_monitoring_page(timeline: MonitoringTimeline, root_path: str = "") -> str:
    """The page; its charts (``app.reports.monitoring_plots``) read the same runs as its
    tables: the features' of the latest run with features, the reliability of the latest
    finished run."""
    latest = next((run for run in reversed(timeline.runs) if run.features), None)
    done = finished(timeline.runs)
    return render("monitoring.html", title=f"Monitoring of model {timeline.model_id}",
                  timeline=timeline, runs=timeline_table(timeline),
                  features=None if latest is None else feature_table(latest),
                  auc_plot=auc_figure(timeline),
                  reliability=reliability_figure(timeline, done[-1] if done else None),
                  drift_plot=drift_figure(latest), root_path=root_path)
