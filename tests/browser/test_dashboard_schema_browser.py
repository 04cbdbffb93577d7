"""The dashboard follows the scoring model's declared schema, in a real headless Chromium.

A clinic's own schema (an integer, a categorical, a numeric and a binary feature; see
tests/e2e/cohort.py) gets its own form, CSV columns and explanation labels; activating another
model while the page is open rebuilds the form before anything is sent; with no model active
the page says so instead of showing a form; the contribution bars share one fixed axis, and
each row says what the API's ``direction`` says (a contribution of floating-point size is
"neutral": no effect). axe-core finds no violation in any
of these states. Screenshot in helpers.ARTIFACTS: dashboard-schema.png.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import (
    ARTIFACTS,
    assert_accessible,
    fill_patient,
    open_page,
    percent,
    skip_without_chromium,
)
from tests.conftest import PATIENT
from tests.e2e.cohort import SITES

skip_without_chromium()

from playwright.sync_api import Page, Route, expect  # noqa: E402

pytestmark = pytest.mark.slow
CLINIC_PATIENT = {"phq9": 20, "site": "south", "sleep_hours": 5.5, "prior_crisis": 1}
CLINIC_COLUMNS = ["patient_id", "phq9", "site", "sleep_hours", "prior_crisis"]  # its id_column


def _choose_clinic_model(page: Page, service: dict[str, Any]) -> None:
    page.select_option("#model-select", str(service["clinic_model"]))
    expect(page.locator("#f-site")).to_have_count(1)


def test_a_model_of_another_schema_gets_its_own_form(
    service: dict[str, Any], page: Page
) -> None:
    model = service["clinic_model"]
    expected = service["http"].post("/v1/risk", json={"features": CLINIC_PATIENT,
                                                      "model_id": model}).json()
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    _choose_clinic_model(page, service)
    assert page.locator("#feature-fields .field").count() == 4
    assert page.locator("#f-age").count() == 0  # the crisis form is gone
    site = page.locator("#f-site")
    assert site.evaluate("e => e.tagName") == "SELECT"
    assert site.locator("option").all_inner_texts() == SITES
    assert site.input_value() == "north"  # the reference patient's category
    assert page.locator("label[for='f-site']").inner_text() == "Site"
    sleep = page.locator("#f-sleep_hours")
    assert (sleep.get_attribute("step"), sleep.get_attribute("min"),
            sleep.get_attribute("max"), sleep.input_value()) == ("any", "0", "24", "7.5")
    assert page.locator("label[for='f-sleep_hours']").inner_text() == "Sleep (h)"
    assert "above 14 count as 14" in page.locator("#f-sleep_hours-help").inner_text()
    assert page.locator("#f-phq9").get_attribute("step") == "1"
    assert page.locator("#f-prior_crisis").evaluate("e => e.tagName") == "SELECT"
    assert page.locator("#csv-columns").inner_text() == ",".join(CLINIC_COLUMNS)
    assert f"Model {model} " in page.locator("#model-summary").inner_text()

    fill_patient(page, CLINIC_PATIENT)
    page.click("#score-button")
    page.locator("#result .bar-row").first.wait_for()
    assert percent(expected["probability"]) in page.locator("#probability").inner_text()
    assert "crisis within 30 days" in page.locator("#probability").inner_text()  # its label
    rows = page.locator("#result .bar-row")
    assert rows.count() == 4 == len(expected["contributions"])
    for i, item in enumerate(expected["contributions"]):
        assert rows.nth(i).get_attribute("data-feature") == item["feature"]
        assert rows.nth(i).locator(".bar-reason").inner_text() == item["reason"]
    by_feature = page.locator("#result .bar-row[data-feature='site']")
    assert by_feature.locator(".bar-reason").inner_text() == "Site: south"
    assert by_feature.locator(".bar-feature").count() == 0  # it would repeat the reason
    sleep_row = page.locator("#result .bar-row[data-feature='sleep_hours']")
    assert sleep_row.locator(".bar-feature").inner_text() == "Sleep: 5.5 h"
    assert f"model {model}" in page.locator("#privacy-statement").inner_text()
    assert_accessible(page, "a patient of the clinic schema")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-schema.png"), full_page=True)


def test_csv_follows_the_chosen_schema_and_names_row_and_column(
    service: dict[str, Any], page: Page
) -> None:
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    _choose_clinic_model(page, service)
    page.fill("#csv-text", "\n".join([
        "site,phq9,prior_crisis,sleep_hours,patient_id,note",  # any order; extras ignored
        "South,20,yes,5.5,a-1,x",  # a category in another case is that category
        "west,3,0,8,a-2,y",
        "north,4,0,lots,a-3,z",
    ]))
    page.click("#csv-button")
    expect(page.locator("#csv-caption")).to_have_text(
        re.compile(rf"^Scored 1 of 3 rows with model {service['clinic_model']}"))
    refused = page.locator("#csv-table tbody tr.refused")
    assert refused.count() == 2
    assert ('row 2 (line 3), column site: "west" is not one of north, south, east'
            in refused.nth(0).inner_text())
    assert ('row 3 (line 4), column sleep_hours: "lots" is not a number'
            in refused.nth(1).inner_text())
    assert "note" in page.locator("#csv-ignored").inner_text()
    with page.expect_download() as download:
        page.click("#csv-download")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0].startswith(",".join(CLINIC_COLUMNS) + ",probability,band")
    assert lines[1].startswith("a-1,20,south,5.5,1,0.")
    assert lines[2].startswith("a-2,3,,8,0,,,,,") and "west" in lines[2]

    page.fill("#csv-text", "id,phq9,site,sleep_hours,prior_crisis\nb-1,20,south,5.5,1")
    page.click("#csv-button")  # a plain ``id`` column still names the rows
    expect(page.locator("#csv-caption")).to_have_text(re.compile(r"^Scored 1 of 1 rows"))
    assert page.locator("#csv-ignored").count() == 0
    assert "b-1" in page.locator("#csv-table tbody").inner_text()

    page.fill("#csv-text", "id,age,phq9\np,40,5")  # a crisis-schema CSV for the clinic model
    page.click("#csv-button")
    page.locator("#csv-text[aria-invalid='true']").wait_for()
    error = page.locator("#csv-error").inner_text()
    assert "site, sleep_hours, prior_crisis" in error and "line 1" in error


def test_the_form_follows_a_newly_activated_model(service: dict[str, Any], page: Page) -> None:
    http, crisis, clinic = service["http"], service["job"]["model_id"], service["clinic_model"]
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    expect(page.locator("#f-age")).to_have_count(1)
    try:
        assert http.post(f"/v1/models/{clinic}/activate").status_code == 200
        page.click("#score-button")  # the active model is fetched again before sending
        expect(page.locator("#result h3")).to_have_text("Not scored")
        assert "model" in page.locator("#result .problem").inner_text()
        expect(page.locator("#page-status")).to_have_text(
            re.compile(f"The active model is now model {clinic}, which scores other features"))
        assert page.locator("#f-age").count() == 0 and page.locator("#f-site").count() == 1
        assert page.locator("#model-select option").first.inner_text() == (
            f"Active model (now model {clinic})")
        page.click("#score-button")  # the reference patient of the clinic schema
        page.locator("#result .bar-row").first.wait_for()
        assert page.locator("#result .bar-row").count() == 4
        assert all(r.get_attribute("data-direction") == "neutral"
                   for r in page.locator("#result .bar-row").all())
    finally:
        assert http.post(f"/v1/models/{crisis}/activate").status_code == 200


def _problem(route: Route, status: int, detail: str) -> None:
    route.fulfill(status=status, content_type="application/problem+json",
                  json={"type": "about:blank", "title": "No model", "status": status,
                        "detail": detail, "errors": [{"field": "model_id", "message": detail}]})


def test_no_active_model_shows_a_message_not_a_form(service: dict[str, Any], page: Page) -> None:
    page.route("**/v1/models/active", lambda route: _problem(route, 409, "no model is active"))
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    expect(page.locator("#no-model")).to_contain_text("No model is active")
    assert page.locator("#feature-fields input, #feature-fields select").count() == 0
    assert page.locator("#score-button").get_attribute("aria-disabled") == "true"
    assert page.locator("#model-select option").first.inner_text() == (
        "Active model (none is active)")
    page.focus("#score-button")  # aria-disabled: it says why rather than doing nothing
    page.keyboard.press("Enter")
    expect(page.locator("#result h3")).to_have_text("Not scored")
    expect(page.locator("#result .problem")).to_contain_text("No model is active")
    page.fill("#csv-text", "id,age\n1,40")
    page.click("#csv-button")
    expect(page.locator("#csv-error")).to_contain_text("No model is active")
    assert_accessible(page, "no active model")

    _choose_clinic_model(page, service)  # a model chosen from the list still scores
    assert page.locator("#score-button").get_attribute("aria-disabled") is None
    page.click("#score-button")
    page.locator("#result .bar-row").first.wait_for()


def test_no_model_at_all_says_one_must_be_trained(service: dict[str, Any], page: Page) -> None:
    page.route("**/v1/models/active",
               lambda route: _problem(route, 404, "no trained model yet"))
    page.route("**/v1/models?*", lambda route: route.fulfill(json={
        "items": [], "total": 0, "limit": 200, "offset": 0, "active_model_id": None}))
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    expect(page.locator("#no-model")).to_contain_text("No model has been trained yet")
    assert page.locator("#csv-columns").inner_text() == "(no model chosen)"
    assert page.locator("#csv-template").is_hidden()


def _bar_scale(page: Page) -> list[tuple[float, float]]:
    """(|contribution| in points, bar width as a fraction of its half track) per row."""
    return page.evaluate("""() => [...document.querySelectorAll('#result .bar-row')].map(row => {
        const text = row.querySelector('.bar-value').textContent;
        const match = /([+\\u2212])([0-9.]+) points/.exec(text);
        const bar = row.querySelector('.bar');
        const half = row.querySelector('.bar-half').getBoundingClientRect().width;
        return [match ? Number(match[2]) : 0, bar ? bar.getBoundingClientRect().width / half : 0];
    })""")


def test_bars_share_a_fixed_axis_and_tiny_contributions_are_neutral(
    service: dict[str, Any], page: Page
) -> None:
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    for patient in (PATIENT, {**PATIENT, "prior_crisis": 0, "substance_use": 0, "phq9": 8}):
        fill_patient(page, patient)
        page.click("#score-button")
        expect(page.locator("#result .bar-row")).to_have_count(len(PATIENT))
        for size, fraction in _bar_scale(page):  # the same scale for every patient: +-50
            if size >= 1:
                assert fraction == pytest.approx(min(size / 50, 1), abs=0.02), (size, fraction)
        page.click("button[type='reset']")

    def tiny(route: Route) -> None:  # what the API gives a patient at the reference
        answer = route.fetch().json()
        for item, value in zip(answer["contributions"], (1e-15, -1e-12), strict=False):
            item.update(contribution_probability=value, contribution=value, direction="neutral")
        # The page takes the API's word for the direction, whatever the sign or the size.
        answer["contributions"][2].update(direction="neutral")
        route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))

    page.route("**/v1/risk", tiny)
    page.click("#score-button")
    expect(page.locator("#result .bar-row")).to_have_count(len(PATIENT))
    for row in page.locator("#result .bar-row").all()[:3]:
        assert row.get_attribute("data-direction") == "neutral"
        assert "no effect 0.00 points" in row.locator(".bar-value").inner_text()
        assert "raises" not in row.inner_text() and "-0.0" not in row.inner_text()
