"""The privacy pages as a privacy officer and a clinician see them, in headless Chromium at
1280 px: no table wider than the page (the ledger's twelve columns included), chart text at
least 12 px, the job report opening with its model card (intended use and caveats) before the
technical statement, and a clinician's key told in words what it may read instead of a raw 403.

Leaves screenshots in helpers.ARTIFACTS (privacy-1280.png, privacy-dataset-report-1280.png,
privacy-job-report-1280.png, privacy-clinician.png).
"""

import re
from typing import Any

import pytest

from tests.browser.helpers import ARTIFACTS, assert_accessible, open_page, skip_without_chromium

skip_without_chromium()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

pytestmark = pytest.mark.slow
WIDTH = 1280

# Every table and its scrolling wrapper fit: the page does not scroll sideways, and no wrapper
# hides columns behind a scroll bar of its own.
OVERFLOW = """() => {
  const page = document.scrollingElement.scrollWidth;
  const wraps = [...document.querySelectorAll('.table-wrap')]
    .filter(w => w.offsetParent !== null && w.scrollWidth > w.clientWidth + 1)
    .map(w => (w.querySelector('caption') || w).textContent.slice(0, 60));
  const main = document.querySelector('main').getBoundingClientRect().right;
  const tables = [...document.querySelectorAll('table')]
    .filter(t => t.offsetParent !== null && t.getBoundingClientRect().right > main + 1)
    .map(t => (t.querySelector('caption') || t).textContent.slice(0, 60));
  return {page, wraps, tables};
}"""

# The smallest chart text as drawn, in CSS pixels: font size times the SVG's scale (the length
# of the transform's first column, so a rotated axis label counts at its size too).
SMALLEST_CHART_TEXT = """() => Math.min(...[...document.querySelectorAll('svg.chart text')]
  .filter(t => t.getBBox().width > 0)
  .map(t => { const m = t.getScreenCTM();
              return parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b); }))"""


def _assert_fits(page: Page, where: str) -> None:
    found = page.evaluate(OVERFLOW)
    assert found["page"] <= WIDTH, (where, found)
    assert not found["wraps"] and not found["tables"], (where, found)


@pytest.fixture
def wide(browser: Browser) -> Any:
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    yield context.new_page()
    context.close()


def test_privacy_pages_fit_1280_px_with_legible_charts(
    service: dict[str, Any], wide: Page
) -> None:
    dataset, job = service["dataset"], service["job"]
    open_page(wide, f"{service['base']}/dashboard/privacy", service["privacy_officer"])
    wide.locator("details summary").first.click()  # the ledger, open
    _assert_fits(wide, "the privacy page")
    ARTIFACTS.mkdir(exist_ok=True)
    wide.screenshot(path=str(ARTIFACTS / "privacy-1280.png"), full_page=True)

    wide.goto(f"{service['base']}/dashboard/privacy#report=/v1/datasets/{dataset['id']}"
              "/privacy-report")
    expect(wide.locator("#report h1")).to_contain_text("Privacy report: dataset")
    expect(wide.locator("#report table").last).to_be_visible()
    _assert_fits(wide, "the dataset report")
    assert wide.evaluate(SMALLEST_CHART_TEXT) >= 12
    wide.screenshot(path=str(ARTIFACTS / "privacy-dataset-report-1280.png"), full_page=True)

    # The same report as its own printable page (what a link opened elsewhere shows).
    wide.set_extra_http_headers({"Authorization": f"Bearer {service['privacy_officer']}",
                                 "Accept": "text/html"})
    wide.goto(f"{service['base']}/v1/datasets/{dataset['id']}/privacy-report")
    _assert_fits(wide, "the dataset report page")
    assert wide.evaluate(SMALLEST_CHART_TEXT) >= 12
    wide.goto(f"{service['base']}/v1/jobs/{job['id']}/privacy-report")
    _assert_fits(wide, "the job report page")
    assert wide.evaluate(SMALLEST_CHART_TEXT) >= 12


def test_the_job_report_opens_with_intended_use_and_caveats(
    service: dict[str, Any], page: Page
) -> None:
    job = service["job"]
    open_page(page, f"{service['base']}/dashboard/privacy#report=/v1/jobs/{job['id']}"
              "/privacy-report", service["clinician"])  # the clinician's "model card" link
    headings = page.locator("#report h2, #report h3").all_inner_texts()
    order = [headings.index(h) for h in ("Model card", "Intended use", "Caveats",
                                         "Privacy statement", "Epsilon per epoch",
                                         "Training data and held-out metrics")]
    assert order == sorted(order), headings
    assert headings[0] == "Model card", headings  # nothing technical before it
    # One legend entry per line drawn: the planned final epsilon and the target share one
    # line when they coincide.
    svg = page.locator("#report svg#epsilon-per-epoch")
    drawn = svg.locator("line.reference").count()
    legend = svg.locator(".legend text").all_text_contents()
    assert drawn == sum(1 for t in legend if "planned final" in t or "target" in t), legend
    assert_accessible(page, "a job's report, as a clinician")


def test_a_clinician_is_told_what_the_privacy_page_holds_for_them(
    service: dict[str, Any], page: Page
) -> None:
    open_page(page, f"{service['base']}/dashboard/privacy", service["clinician"])
    refused = page.locator("#datasets-refused")
    expect(refused).to_contain_text("Your key's role (clinician) may not read datasets")
    # no raw status (a word of its own: a model's hash like 640387c6d641 may hold the digits)
    assert re.search(r"\b403\b", page.locator("main").inner_text()) is None
    assert page.locator("#page-status").inner_text() == ""
    assert page.locator("#datasets-table").count() == 0 and page.locator("details").count() == 0
    model_row = page.locator(f"#models-table tr[data-model='{service['job']['model_id']}']")
    expect(model_row).to_contain_text("active")
    assert_accessible(page, "the privacy page, as a clinician")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "privacy-clinician.png"), full_page=True)
