"""The monitoring page's charts (``app.reports.monitoring_plots``): reliability from the noisy
released counts (bins without positive noisy rows left out, rates clipped to [0, 1]), PSI per
feature sorted with its interval and its verdict in words, the ROC-AUC timeline from two
finished runs on; and the page stays self-contained (no script). Timelines built in memory."""

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

from app.jobs.held_out import HeldOutBin
from app.monitoring.schemas import MonitoringRunOut, MonitoringTimeline
from app.reports.monitoring_html import render_monitoring_page
from app.reports.monitoring_plots import observed_rate, psi_order, reliability_points
from tests.reports.html_tags import start_tags

SVG = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>"


def _bin(p_from: float, p_to: float, rows: float, positives: float) -> dict[str, Any]:
    return {"p_from": p_from, "p_to": p_to, "p_representative": (p_from + p_to) / 2,
            "rows": rows, "positives": positives, "observed_rate": None, "observed_ci": None}


TRAINING = [_bin(0.0, 0.1, 400.0, 20.0), _bin(0.1, 0.3, 200.0, 40.0),
            _bin(0.3, 1.0, 50.0, 30.0)]
FOLLOW_UP = [_bin(0.0, 0.1, 300.0, -4.0),   # negative noisy positives: rate clipped to 0
             _bin(0.1, 0.3, -2.5, 3.0),     # negative noisy rows: skipped
             _bin(0.3, 1.0, 8.0, 11.0)]     # more positives than rows: rate clipped to 1


def _feature(name: str, psi: float | None, ci: list[float] | None,
             verdict: str) -> dict[str, Any]:
    return {"name": name, "psi": psi, "psi_ci": ci, "wasserstein": None,
            "wasserstein_ci": None, "verdict": verdict, "bins": ["a", "b"],
            "reference": [0.5, 0.5], "follow_up": [0.4, 0.6]}


FEATURES = [_feature("gaf", 0.02, [0.0, 0.05], "no_drift"),  # not in PSI order on purpose
            _feature("phq9", 0.31, [0.2, 0.4], "drift"),
            _feature("age", 0.09, [0.01, 0.2], "inconclusive"),
            _feature("sessions", None, None, "inconclusive")]


def _run(run_id: int, status: str = "succeeded", auc: float | None = 0.74,
         features: list[dict[str, Any]] | None = None) -> MonitoringRunOut:
    done = status == "succeeded"
    performance = {"reliability": FOLLOW_UP, "roc_auc": auc, "roc_auc_ci": [auc - 0.05,
                                                                             auc + 0.05],
                   "drift": {"overall": {"roc_auc": {"reference": 0.8, "follow_up": auc}}}
                   } if done and auc is not None else None
    return MonitoringRunOut.model_validate({
        "id": run_id, "model_id": 1, "dataset_id": 10 + run_id, "job_id": 20 + run_id,
        "status": status, "period": None,
        "privacy": {"target_epsilon": 2.0, "delta": 1e-6, "noise_multiplier": 1.0,
                    "l2_sensitivity": 3.0},
        "reference_release_id": 5, "performance": performance,
        "roc_auc": auc if done else None,
        "roc_auc_ci": [auc - 0.05, auc + 0.05] if done and auc is not None else None,
        "features": (features if features is not None else FEATURES) if done else [],
        "fairness": None, "notes": [], "error": None,
        "created_at": datetime(2026, 1, 1, tzinfo=UTC), "finished_at": None})


def _timeline(*runs: MonitoringRunOut, training: list[dict[str, Any]] | None = TRAINING
              ) -> MonitoringTimeline:
    return MonitoringTimeline(
        model_id=1, outcome="Crisis within 30 days", runs=list(runs),
        training_reliability=None if training is None else [HeldOutBin.model_validate(b)
                                                            for b in training])


def _svg(page: str, chart_id: str) -> ET.Element | None:
    found = re.search(rf'<svg [^>]*id="{chart_id}".*?</svg>', page, re.DOTALL)
    return None if found is None else ET.fromstring(found.group(0))


def _tooltips(svg: ET.Element, css: str = "point") -> list[str]:
    return [str(e.findtext(f"{SVG}title")) for e in svg.iter() if e.get("class") == css]


def _legend(svg: ET.Element) -> list[str]:
    legend = next(g for g in svg.iter(f"{SVG}g") if g.get("class") == "legend")
    return [str(t.text) for t in legend.iter(f"{SVG}text")]


def test_rates_come_from_the_noisy_counts_clipped_and_bins_without_rows_are_skipped() -> None:
    assert observed_rate(FOLLOW_UP[0]) == 0.0
    assert observed_rate(FOLLOW_UP[1]) is None
    assert observed_rate(_bin(0.0, 0.1, 0.0, 0.0)) is None
    assert observed_rate(FOLLOW_UP[2]) == 1.0
    assert observed_rate(TRAINING[1]) == 0.2
    assert reliability_points(FOLLOW_UP) == [(0.05, 0.0), (0.65, 1.0)]
    assert reliability_points(None) == []


def test_the_reliability_chart_draws_both_sides_and_the_diagonal() -> None:
    page = render_monitoring_page(_timeline(_run(1)))
    svg = _svg(page, "reliability")
    assert svg is not None
    tips = _tooltips(svg)
    assert [t for t in tips if t.startswith("training-time")] == [
        "training-time evaluation: x = 0.05, y = 0.05", "training-time evaluation: x = 0.2, "
        "y = 0.2", "training-time evaluation: x = 0.65, y = 0.6"]
    assert [t for t in tips if t.startswith("follow-up")] == [
        "follow-up, run 1: x = 0.05, y = 0", "follow-up, run 1: x = 0.65, y = 1"]
    assert "perfect calibration" in _legend(svg)
    assert svg.findtext(f"{SVG}title") == "Reliability at training time and on run 1 (DP, binned)"
    # The table beside it names the skipped bin in words.
    section = page.split('<section id="reliability">')[1].split("</section>")[0]
    assert "<table>" in section and "skipped: noisy rows ≤ 0" in section
    assert section.count("skipped") == 1


def test_without_the_training_bins_the_follow_up_is_drawn_alone() -> None:
    svg = _svg(render_monitoring_page(_timeline(_run(1), training=None)), "reliability")
    assert svg is not None
    assert not [t for t in _tooltips(svg) if t.startswith("training-time")]
    assert len([t for t in _tooltips(svg) if t.startswith("follow-up")]) == 2


def test_psi_bars_are_sorted_with_whiskers_and_verdicts_in_words() -> None:
    ranked = psi_order(_run(1).features)
    assert [f.name for f in ranked] == ["phq9", "age", "gaf"]  # no PSI: not drawn
    svg = _svg(render_monitoring_page(_timeline(_run(1))), "feature-drift")
    assert svg is not None
    assert _legend(svg) == ["1 phq9: drift", "2 age: inconclusive", "3 gaf: no drift"]
    assert _tooltips(svg) == ["1 phq9: drift: x = 1, y = 0.31",
                              "2 age: inconclusive: x = 2, y = 0.09",
                              "3 gaf: no drift: x = 3, y = 0.02"]
    shapes = [e.tag.removeprefix(SVG) for e in svg.iter() if e.get("class") == "point"]
    assert shapes == ["path", "rect", "circle"]  # triangle, square, circle: not colour alone
    whiskers = [g for g in svg.iter(f"{SVG}g") if "95% interval" in (g.get("data-label") or "")]
    assert len(whiskers) == 3 and all(len(list(g.iter(f"{SVG}path"))) == 1 for g in whiskers)


def test_no_psi_means_no_drift_chart_but_the_table_stays() -> None:
    page = render_monitoring_page(_timeline(_run(1, features=[
        _feature("age", None, None, "inconclusive")])))
    assert _svg(page, "feature-drift") is None
    assert '<section id="features">' in page


def test_the_auc_timeline_needs_two_finished_runs() -> None:
    one = render_monitoring_page(_timeline(_run(1), _run(2, status="queued")))
    assert _svg(one, "auc-timeline") is None
    two = render_monitoring_page(_timeline(_run(1, auc=0.74), _run(2, status="running"),
                                           _run(3, auc=0.61)))
    svg = _svg(two, "auc-timeline")
    assert svg is not None
    assert _tooltips(svg) == ["ROC-AUC on the follow-up: x = 1, y = 0.74",
                              "ROC-AUC on the follow-up: x = 3, y = 0.61"]
    assert _legend(svg).count("95% interval") == 1  # one entry for every whisker
    references = [str(e.findtext(f"{SVG}title")) for e in svg.iter()
                  if e.get("class") == "reference"]
    assert references == ["chance (0.5): 0.5", "training-time ROC-AUC: 0.8"]


def test_the_page_has_no_script_and_escapes_names_in_the_charts() -> None:
    hostile = [_feature(EVIL, 0.2, [0.1, 0.3], "drift")]
    page = render_monitoring_page(_timeline(_run(1), _run(2, features=hostile)))
    tags = start_tags(page)
    assert "script" not in tags and "<script" not in page
    assert tags.count("svg") == 3
    drift = _svg(page, "feature-drift")
    assert drift is not None and _legend(drift) == [f"1 {EVIL}: drift"]  # text, not markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;: drift" in page
    for chart_id in ("reliability", "feature-drift", "auc-timeline"):
        svg = _svg(page, chart_id)
        assert svg is not None and svg.get("role") == "img", chart_id
        assert svg.get("aria-labelledby") == f"{chart_id}-title"


def test_a_timeline_without_finished_runs_has_no_charts() -> None:
    page = render_monitoring_page(_timeline(_run(1, status="queued")))
    assert "<svg" not in page and '<section id="reliability">' not in page
    empty = render_monitoring_page(_timeline())
    assert "No monitoring run yet" in empty and "<svg" not in empty
