"""A model's monitoring page in headless Chromium: a model of its own with one finished run on a
small shifted follow-up, reached from the privacy page's model list (a privacy officer's key)
and opened as its own printable page. The reliability and feature-drift charts are drawn, axe
finds no violation, and nothing breaks the page's Content-Security-Policy (the ``page``
fixture fails a test on any console error). A clinician, who may not read monitoring, is
offered no link to it. Leaves monitoring-page.png in helpers.ARTIFACTS.
"""

import re
import time
from typing import Any

import httpx
import pytest

from bench.processes import api_client
from tests.api.scoring_helpers import QUICK_JOB
from tests.browser.helpers import ARTIFACTS, assert_accessible, open_page, skip_without_chromium
from tests.conftest import SMALL_DATASET

skip_without_chromium()

from playwright.sync_api import Page, expect  # noqa: E402

pytestmark = pytest.mark.slow
CHARTS = ("reliability", "feature-drift")


def _finished(http: httpx.Client, location: str) -> dict[str, Any]:
    """A job's or a monitoring run's state once it has left the queue (it must succeed)."""
    deadline = time.monotonic() + 120
    while (state := http.get(location).json())["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state["status"] == "succeeded", state
    return dict(state)


@pytest.fixture(scope="module")
def monitored(service: dict[str, Any]) -> dict[str, Any]:
    """A model trained on a dataset of its own (the shared datasets' ledgers stay as they
    are) and one finished monitoring run of it on a 2,000-row follow-up."""
    http = service["http"]
    body = {**SMALL_DATASET, "name": "monitored-clinic",
            "source": {**SMALL_DATASET["source"], "seed": 5150}}  # type: ignore[dict-item]
    dataset = http.post("/v1/datasets", json=body)
    assert dataset.status_code == 201, dataset.text
    job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **QUICK_JOB})
    assert job.status_code == 202, job.text
    model_id = _finished(http, job.headers["location"])["model_id"]
    follow_up = http.post("/v1/datasets", json={
        "name": "monitored follow-up",
        "source": {"kind": "synthetic", "n_rows": 2000, "seed": 5151,
                   "shift": "phq9_and_outcome"},
        "privacy_budget": {"epsilon": 10.0, "delta": 1e-6},
        "follow_up": {"model_id": model_id, "period_start": "2026-01-01",
                      "period_end": "2026-06-30"}})
    assert follow_up.status_code == 201, follow_up.text
    run = http.post(f"/v1/models/{model_id}/monitoring-runs", json={
        "dataset_id": follow_up.json()["id"], "privacy": {"target_epsilon": 3.0}})
    assert run.status_code == 202, run.text
    done = _finished(http, run.headers["location"])
    assert done["reference_release_id"] is not None, done  # the feature-drift chart needs it
    return {"model_id": model_id, "run": done}


def _assert_charts(page: Page, scope: str, model_id: int) -> None:
    expect(page.locator(f"{scope} h1")).to_have_text(f"Monitoring of model {model_id}")
    for chart in CHARTS:
        svg = page.locator(f"{scope} svg#{chart}")
        expect(svg).to_be_visible()
        assert svg.locator(".point").count() > 0, chart
        expect(svg.locator("title").first).not_to_be_empty()
    drawn = page.locator(f"{scope} svg#reliability .series")
    labels = [drawn.nth(i).get_attribute("data-label") for i in range(drawn.count())]
    assert "training-time evaluation" in labels, labels  # the model's own evaluation too
    assert page.locator(f"{scope} svg#auc-timeline").count() == 0  # one run: no timeline


def test_the_privacy_page_links_to_the_monitoring_page_with_its_charts(
    service: dict[str, Any], monitored: dict[str, Any], page: Page
) -> None:
    model_id = monitored["model_id"]
    open_page(page, f"{service['base']}/dashboard/privacy", service["privacy_officer"])
    headers = page.locator("#models-table thead th").all_inner_texts()
    assert "Monitoring" in headers, headers
    row = page.locator(f"#models-table tr[data-model='{model_id}']")
    row.get_by_role("link", name=f"Monitoring of model {model_id}").click()
    expect(page).to_have_url(re.compile(rf"#report=/v1/models/{model_id}/monitoring$"))
    _assert_charts(page, "#report", model_id)
    assert_accessible(page, "the monitoring page, in the privacy page")


def test_the_monitoring_page_on_its_own_is_accessible_and_self_contained(
    service: dict[str, Any], monitored: dict[str, Any], page: Page
) -> None:
    model_id = monitored["model_id"]
    page.set_extra_http_headers({"Authorization": f"Bearer {service['privacy_officer']}",
                                 "Accept": "text/html"})
    response = page.goto(f"{service['base']}/v1/models/{model_id}/monitoring")
    assert response is not None and response.status == 200
    assert "default-src 'none'" in response.headers["content-security-policy"]
    _assert_charts(page, "body", model_id)
    assert page.locator("script").count() == 0
    assert_accessible(page, "the monitoring page")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "monitoring-page.png"), full_page=True)


def test_a_clinician_is_offered_no_monitoring_link(
    service: dict[str, Any], monitored: dict[str, Any], page: Page
) -> None:
    model_id = monitored["model_id"]
    refused = api_client(service["base"], service["clinician"]).get(
        f"/v1/models/{model_id}/monitoring")
    assert refused.status_code == 403, refused.text  # the role rule the link follows
    open_page(page, f"{service['base']}/dashboard/privacy", service["clinician"])
    row = page.locator(f"#models-table tr[data-model='{model_id}']")
    expect(row).to_be_visible()
    assert row.get_by_role("link", name=re.compile("Monitoring")).count() == 0
    headers = page.locator("#models-table thead th").all_inner_texts()
    assert not [h for h in headers if "Monitoring" in h], headers
