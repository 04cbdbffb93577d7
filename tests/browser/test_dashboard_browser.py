"""The clinician dashboard in a real headless Chromium (Debian's package, driven by Playwright)
against a real `dpcrisis serve` process with a trained model: the API key field, keyboard
scoring, field errors from the API, CSV scoring and downloads, the privacy page and its reports,
200% zoom, axe-core's accessibility rules, and no console or CSP errors. Each page runs with the
key of the role that uses it. The fixtures (one service, one browser) are in conftest.py;
test_dashboard_schema_browser.py covers a model of another declared schema.

Leaves screenshots in helpers.ARTIFACTS (dashboard.png; dashboard-privacy.png, dashboard-report.png,
dashboard-200pct.png) for people to look at.
"""

import re
from pathlib import Path
from typing import Any

import pytest

from app.privacy.figures import epsilon_text
from tests.browser.helpers import (
    ARTIFACTS,
    assert_accessible,
    fill_patient,
    open_page,
    percent,
    skip_without_chromium,
    tab_to,
)
from tests.conftest import PATIENT

skip_without_chromium()

from playwright.sync_api import Browser, Page, Request, Route, expect  # noqa: E402

pytestmark = pytest.mark.slow
SEED_ORDER = ["age", "phq9", "gaf", "num_sessions", "substance_use", "prior_crisis"]


def value_text(feature: dict[str, Any], value: float | str) -> str:
    """What the chart shows next to a reason (schema.js valueText())."""
    if feature["type"] == "binary":
        return "yes" if float(value) >= 0.5 else "no"
    if isinstance(value, str):
        return value
    unit = f" {feature['unit']}" if feature["unit"] else ""
    return f"{value:g}{unit}"


def test_score_a_patient_with_the_keyboard(service: dict[str, Any], page: Page) -> None:
    expected = service["http"].post("/v1/risk", json={"features": PATIENT}).json()
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    spec = service["http"].get("/v1/features").json()
    active = service["http"].get("/v1/models/active").json()
    assert [f["name"] for f in spec] == active["features"]  # the active model's schema
    assert page.locator("#feature-fields .field").count() == len(spec)
    for feature in spec:  # every control has a label, its range in the help text, and
        control = page.locator(f"#f-{feature['name']}")  # starts at the reference patient
        assert control.evaluate("e => e.labels.length") == 1
        assert str(feature["maximum"]) in page.locator(f"#f-{feature['name']}-help").inner_text()
        assert control.input_value() == str(feature["reference"])
        if feature["type"] == "integer":
            assert control.get_attribute("step") == "1"
            assert control.get_attribute("min") == str(feature["minimum"])
            assert control.get_attribute("max") == str(feature["maximum"])
    assert f"Model {active['id']} " in page.locator("#model-summary").inner_text()
    assert page.locator("#csv-columns").inner_text() == ",".join(["id", *active["features"]])

    tab_to(page, "model-select")  # from the top of the page, through the skip link and the nav
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == f"f-{spec[0]['name']}"
    for feature in spec:
        value = PATIENT[feature["name"]]
        if feature["type"] == "binary":
            page.keyboard.type("Yes" if value else "No")  # select by type-ahead
        else:
            page.keyboard.press("Control+A")  # replace the reference value
            page.keyboard.type(str(value))
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "score-button"
    page.keyboard.press("Enter")

    badge = page.locator("#result .badge")
    badge.wait_for()
    page.locator("#result .bar-row").first.wait_for()
    band_text = {"low": "Low risk", "medium": "Medium risk", "high": "High risk"}
    assert badge.inner_text().endswith(band_text[expected["band"]])
    assert badge.get_attribute("data-band") == expected["band"]
    assert page.evaluate("document.activeElement.id") == "result-heading"
    assert page.locator("#result").get_attribute("aria-live") == "polite"
    assert percent(expected["probability"]) in page.locator("#probability").inner_text()
    thresholds = page.locator("#thresholds").inner_text()
    assert percent(expected["band_thresholds"]["medium_high"]) in thresholds
    # The baseline in words: the reference patient, its risk, the base rate, what "raises" means.
    baseline = page.locator("#baseline").inner_text()
    reference = expected["reference"]["probability"]
    assert f"predicted probability is {percent(reference)}" in baseline
    assert "not an average patient" in baseline and "PHQ-9: 5 points" in baseline
    rate = service["http"].get("/v1/models/active").json()["metrics"].get("prevalence")
    if rate:  # the DP estimate of the evaluation part, when it had rows enough
        assert f"About {percent(rate)} of the held-out patients" in baseline
        assert f"This patient's {percent(expected['probability'])} is" in baseline
        if reference / rate < 0.67:
            assert "\u201Craises\u201D means higher than for the reference patient" in baseline
    else:
        assert "No base rate is available" in baseline

    rows = page.locator("#result .bar-row")
    assert rows.count() == len(spec) == len(expected["contributions"])
    for i, item in enumerate(expected["contributions"]):  # same order: largest first
        row = rows.nth(i)
        assert row.get_attribute("data-feature") == item["feature"]
        assert row.locator(".bar-reason").inner_text() == item["reason"]
        feature = next(f for f in spec if f["name"] == item["feature"])
        shown = f"{item['label']}: {value_text(feature, item['value'])}"
        if shown != item["reason"]:  # label and value as sent, unless the reason says just that
            assert row.locator(".bar-feature").inner_text() == shown
        assert item["direction"] in row.locator(".bar-value").inner_text()
        width = row.locator(".bar").evaluate("e => e.getBoundingClientRect().width")
        assert width > 0

    statement = page.locator("#privacy-statement").inner_text()
    model = expected["model"]
    assert f"model {model['id']}" in statement and "differential privacy" in statement
    assert f"ε = {epsilon_text(model['epsilon'])}" in statement
    assert "record (one patient)" in statement
    assert "by the PLD accountant." in statement and "RDP" not in statement  # one epsilon
    report = f"/v1/jobs/{service['job']['id']}/privacy-report"
    assert page.locator("#privacy-statement a").get_attribute("href") == (
        f"/dashboard/privacy#report={report}"
    )

    assert page.evaluate("localStorage.length") == 0  # only the key, and only for this tab
    assert page.evaluate("Object.keys(sessionStorage)") == ["dpcrisis.apiKey"]

    assert_accessible(page, "a scored patient")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    page.click("#privacy-statement a")  # the model card, read with the clinician's key
    expect(page.locator("#report h1")).to_have_text(
        f"Privacy report: job {service['job']['id']}")


def test_the_page_asks_for_a_key_and_says_when_it_is_refused(
    service: dict[str, Any], page: Page
) -> None:
    api_calls: list[str] = []
    page.on("request", lambda r: api_calls.append(r.url) if "/v1/" in r.url else None)
    page.goto(f"{service['base']}/dashboard")
    expect(page.locator("#page-status")).to_have_text(re.compile("Paste your API key"))
    assert page.locator("#api-key").evaluate("e => e.labels.length") == 1
    page.press("#api-key", "Enter")
    expect(page.locator("#api-key-error")).to_have_text(re.compile("Paste your API key first"))
    assert api_calls == []  # without a key the page calls nothing

    page.fill("#api-key", "dpk_not-a-key-of-this-service")
    page.press("#api-key", "Enter")
    expect(page.locator("#api-key[aria-invalid='true']")).to_have_count(1)
    expect(page.locator("#api-key-error")).to_have_text(re.compile("refused this key"))
    assert api_calls and page.locator("body[data-ready='true']").count() == 0

    page.fill("#api-key", service["clinician"])  # a valid key, of a role the page is not for
    page.press("#api-key", "Enter")
    page.wait_for_selector("body[data-ready='true']")
    page.goto(f"{service['base']}/dashboard/privacy")  # datasets refused: said in words
    expect(page.locator("#datasets-refused")).to_contain_text("role (clinician) may not read")

    page.click("#key-forget")
    expect(page.locator("#page-status")).to_have_text(re.compile("Paste your API key"))
    assert page.evaluate("sessionStorage.length") == 0


def test_out_of_range_value_is_shown_next_to_its_field(
    service: dict[str, Any], page: Page
) -> None:
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    fill_patient(page, PATIENT)
    page.focus("#f-phq9")
    page.keyboard.press("Control+A")
    page.keyboard.type("30")
    page.keyboard.press("Enter")  # implicit submission from a text field

    field = page.locator("#f-phq9[aria-invalid='true']")
    field.wait_for()
    error = page.locator("#f-phq9-error")
    assert error.is_visible()  # in a clinician's words, from the model's schema
    assert "PHQ-9 must be a whole number from 0 to 27 points. You entered 30." in (
        error.inner_text())
    assert "Input should" not in page.locator("#result").inner_text()
    assert "f-phq9-error" in (field.get_attribute("aria-describedby") or "").split()
    assert page.locator("[aria-invalid='true']").count() == 1
    assert page.evaluate("document.activeElement.id") == "result-heading"
    assert page.locator("#result .problem a[href='#f-phq9']").count() == 1

    page.fill("#f-phq9", "22")  # fixing it and scoring again clears the error
    page.click("#score-button")
    page.locator("#result .badge").wait_for()
    assert page.locator("[aria-invalid='true']").count() == 0
    assert not error.is_visible()


def test_csv_file_scores_every_row(service: dict[str, Any], page: Page, tmp_path: Path) -> None:
    names = list(PATIENT)
    lines = [",".join(["id", *names]),
             ",".join(["p-1", *(str(PATIENT[n]) for n in names)]),
             "p-2,60,3,85,1,0,0",
             '"p-3, quoted",25,15,40,20,1,0']
    if names != SEED_ORDER:
        pytest.fail(f"the CSV rows above assume the seed feature order, not {names}")
    csv = tmp_path / "patients.csv"
    csv.write_text("\r\n".join(lines) + "\r\n")
    # The batch endpoint is used when the service has it; without it, one call per row.
    has_batch = service["http"].post("/v1/risk/batch", json={}).status_code not in (404, 405)
    calls: list[str] = []

    def record_post(request: Request) -> None:
        if request.method == "POST":
            calls.append(request.url.rsplit("/v1/", 1)[-1].split("?")[0])

    page.on("request", record_post)
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    page.set_input_files("#csv-file", str(csv))
    expect(page.locator("#csv-text")).to_have_value(re.compile("p-3, quoted"))
    page.click("#csv-button")
    table = page.locator("#csv-table")
    table.wait_for()
    assert page.locator("#csv-caption").inner_text().startswith("Scored 3 of 3 rows")
    rows = table.locator("tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)] == [
        "p-1", "p-2", "p-3, quoted"]
    for i in range(3):
        assert rows.nth(i).locator(".badge").count() == 1
        assert "%" in rows.nth(i).locator("td").nth(2).inner_text()
    assert calls == (["risk/batch"] if has_batch else ["risk/batch"] + ["risk"] * 3)

    with page.expect_download() as download:  # the results, in the schema's columns
        page.click("#csv-download")
    written = Path(download.value.path()).read_text().splitlines()
    assert written[0] == ",".join(["id", *names, "probability", "band", "main_reason",
                                   "model_id", "error"])
    assert written[1].startswith(",".join(["p-1", *(str(PATIENT[n]) for n in names)]) + ",")
    assert written[3].startswith('"p-3, quoted",25,15,40,20,1,0,')

    bad = "\n".join([",".join(names), "40,30,50,5,0,0", "40,5,50,5,0,0"])
    page.fill("#csv-text", bad)
    page.click("#csv-button")
    expect(page.locator("#csv-caption")).to_have_text(re.compile(r"^Scored 1 of 2 rows"))
    refused = page.locator("#csv-table tbody tr.refused")
    assert refused.count() == 1
    assert ("row 1 (line 2), column phq9: 30 is outside the allowed range [0, 27]"
            in refused.inner_text())

    page.fill("#csv-text", "age,phq9\n40,5")
    page.click("#csv-button")
    page.locator("#csv-text[aria-invalid='true']").wait_for()
    assert "gaf" in page.locator("#csv-error").inner_text()
    assert_accessible(page, "a CSV header error")


def test_csv_template_has_the_schema_columns_and_the_reference_patient(
    service: dict[str, Any], page: Page
) -> None:
    spec = service["http"].get("/v1/features").json()
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    with page.expect_download() as download:
        page.click("#csv-template")
    assert download.value.suggested_filename.endswith(".csv")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines == [",".join(["id", *(f["name"] for f in spec)]),
                     ",".join(["reference-patient", *(str(f["reference"]) for f in spec)])]
    page.fill("#csv-text", "\n".join(lines))  # the template scores as it is
    page.click("#csv-button")
    expect(page.locator("#csv-caption")).to_have_text(re.compile(r"^Scored 1 of 1 rows"))


def test_csv_falls_back_to_one_call_per_row_without_a_batch_endpoint(
    service: dict[str, Any], page: Page
) -> None:
    """A service without POST /v1/risk/batch (404 from no route): every row still scores."""
    seen = {"batch": 0, "single": 0}

    def no_batch(route: Route) -> None:
        seen["batch"] += 1
        route.fulfill(status=404, content_type="application/problem+json",
                      json={"type": "https://dpcrisis.dev/problems/http-error",
                            "title": "Not Found", "status": 404, "detail": "Not Found"})

    def count_single(request: Request) -> None:
        if request.url.endswith("/v1/risk"):
            seen["single"] += 1

    page.route(re.compile(r"/v1/risk/batch(\?|$)"), no_batch)  # the compact view too
    page.on("request", count_single)
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    names = list(PATIENT)
    row = ",".join(str(PATIENT[n]) for n in names)
    for attempt in (1, 2):  # the second CSV goes straight to one call per row
        page.fill("#csv-text", "\n".join([",".join(names), row, row]))
        page.click("#csv-button")
        expect(page.locator("#csv-caption")).to_have_text(re.compile(r"^Scored 2 of 2 rows"))
        assert seen == {"batch": 1, "single": 2 * attempt}


def test_privacy_page_lists_datasets_models_and_links_reports(
    service: dict[str, Any], page: Page
) -> None:
    dataset, job = service["dataset"], service["job"]
    open_page(page, f"{service['base']}/dashboard/privacy", service["privacy_officer"])
    row = page.locator(f"#datasets-table tr[data-dataset='{dataset['id']}']")
    assert dataset["name"] in row.inner_text()
    report = service["http"].get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    cells = row.locator("td")
    assert cells.nth(0).inner_text() == f"{report['budget']['epsilon']:g}"
    assert cells.nth(2).inner_text() == report["spent"]["epsilon_text"]
    assert "% spent" in cells.nth(4).inner_text()
    # A privacy officer may not read what the patients spent on other tables: a bound.
    assert cells.nth(3).inner_text().startswith("at most "), cells.nth(3).inner_text()
    ledger = page.locator("details").first
    ledger.locator("summary").click()
    assert f"Job {job['id']}" in ledger.inner_text()
    model_row = page.locator(f"#models-table tr[data-model='{job['model_id']}']")
    assert "active" in model_row.inner_text()
    assert_accessible(page, "the privacy page")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-privacy.png"), full_page=True)

    page.click(f"text=Report of dataset {dataset['id']}")  # fetched with the key, shown here
    page.locator("#report h1").wait_for()
    assert page.url.endswith(f"/dashboard/privacy#report=/v1/datasets/{dataset['id']}"
                             "/privacy-report")
    assert page.locator("#report svg").count() >= 1 and page.locator("h1:visible").count() == 1
    assert page.evaluate("document.activeElement.tagName") == "H1"
    page.screenshot(path=str(ARTIFACTS / "dashboard-report.png"), full_page=True)
    page.click(f"#report a[href$='/v1/jobs/{job['id']}/privacy-report']")  # a report's link
    expect(page.locator("#report h1")).to_have_text(f"Privacy report: job {job['id']}")
    page.reload()  # the address names the report: it comes back with the tab's key
    expect(page.locator("#report h1")).to_have_text(f"Privacy report: job {job['id']}")


def test_reflows_at_200_percent_zoom(service: dict[str, Any], browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 640, "height": 900})  # 1280 px at 200%
    page = context.new_page()
    try:
        open_page(page, f"{service['base']}/dashboard", service["clinician"])
        page.select_option("#f-substance_use", "1")
        page.select_option("#f-prior_crisis", "1")
        for name in ("age", "phq9", "gaf", "num_sessions"):
            page.fill(f"#f-{name}", str(PATIENT[name]))
        page.click("#score-button")
        page.locator("#result .bar-row").first.wait_for()
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"horizontal scrolling at 200% zoom: {overflow}px"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-200pct.png"), full_page=True)
    finally:
        context.close()
