"""The clinician dashboard in a real headless Chromium (Debian's package, driven by Playwright)
against a real `dpcrisis serve` process with a trained model: the API key field, keyboard
scoring, field errors from the API, CSV scoring, the privacy page and its reports, 200% zoom,
and no console or CSP errors. Each page runs with the key of the role that uses it.

Leaves screenshots in artifacts/ (dashboard.png; dashboard-privacy.png, dashboard-report.png,
dashboard-200pct.png) for people to look at.
"""

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.privacy.figures import epsilon_text
from tests.conftest import FAST_TRAINING, PATIENT, SMALL_DATASET
from tests.e2e.service import api_client, start_server, wait_ready

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip(
        f"{CHROMIUM} is missing (apt-get install chromium); CI installs it and runs this test",
        allow_module_level=True,
    )

from playwright.sync_api import (  # noqa: E402
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Response,
    Route,
    expect,
    sync_playwright,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A served app with one small dataset and one trained model; yields ids and the base URL."""
    process, base = start_server(tmp_path_factory.mktemp("dashboard"))
    try:
        wait_ready(process, base)
        http = api_client(base)  # admin
        keys = {role: http.post("/v1/keys", json={"name": role, "role": role}).json()["key"]
                for role in ("clinician", "privacy_officer")}
        dataset = http.post("/v1/datasets", json=SMALL_DATASET)
        assert dataset.status_code == 201, dataset.text
        job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                          "privacy": {"target_epsilon": 3},
                                          "training": FAST_TRAINING})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 120
        while (state := http.get(job.headers["location"]).json())["status"] in ("queued",
                                                                               "running"):
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["status"] == "succeeded", state
        yield {"base": base, "dataset": dataset.json(), "job": state, "http": http, **keys}
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page that fails its test on a script error, a CSP violation, a request that
    leaves the service, or a failed load of anything but an API call."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        # Chromium logs every 4xx fetch as "Failed to load resource"; those are expected here
        # (the out-of-range test, the batch feature detection). Everything else is a bug.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(message.text)

    def on_request(request: Request) -> None:
        if not request.url.startswith("http://127.0.0.1:"):  # patient data stays with the API
            problems.append(f"request outside the service: {request.url}")

    def on_response(response: Response) -> None:
        if response.status >= 400 and "/v1/" not in response.url:
            problems.append(f"{response.status} for {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", on_request)
    page.on("response", on_response)
    yield page
    context.close()
    assert not problems, problems


def _percent(p: float) -> str:
    """What the page shows for a probability (dashboard.js percent())."""
    return f"{p * 100:.2g} %" if 0 < p < 0.01 else f"{p * 100:.1f} %"


def _open(page: Page, url: str, key: str) -> None:
    """Open a dashboard page in a fresh tab: paste the key, press Enter, wait for the data."""
    page.goto(url)
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")  # stores the key for this tab and reloads
    page.wait_for_selector("body[data-ready='true']")


def _tab_to(page: Page, element_id: str, limit: int = 20) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == element_id:
            return
    pytest.fail(f"Tab never reached #{element_id}")


def test_score_a_patient_with_the_keyboard(service: dict[str, Any], page: Page) -> None:
    expected = service["http"].post("/v1/risk", json={"features": PATIENT}).json()
    _open(page, f"{service['base']}/dashboard", service["clinician"])
    spec = service["http"].get("/v1/features").json()
    assert page.locator("#feature-fields .field").count() == len(spec)
    for feature in spec:  # every control has a label, and its range in the help text
        control = page.locator(f"#f-{feature['name']}")
        assert control.evaluate("e => e.labels.length") == 1
        assert str(feature["maximum"]) in page.locator(f"#f-{feature['name']}-help").inner_text()

    _tab_to(page, "f-age")  # from the top of the page, through the skip link and the nav
    for feature in spec:
        value = PATIENT[feature["name"]]
        if feature["type"] == "binary":
            page.keyboard.type("Yes" if value else "No")  # select by type-ahead
        else:
            page.keyboard.type(str(value))
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "model-select"
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
    assert _percent(expected["probability"]) in page.locator("#probability").inner_text()
    thresholds = page.locator("#thresholds").inner_text()
    assert _percent(expected["band_thresholds"]["medium_high"]) in thresholds

    rows = page.locator("#result .bar-row")
    assert rows.count() == len(spec) == len(expected["contributions"])
    for i, item in enumerate(expected["contributions"]):  # same order: largest first
        row = rows.nth(i)
        assert row.get_attribute("data-feature") == item["feature"]
        assert row.locator(".bar-reason").inner_text() == item["reason"]
        assert item["direction"] in row.locator(".bar-value").inner_text()
        width = row.locator(".bar").evaluate("e => e.getBoundingClientRect().width")
        assert width > 0

    statement = page.locator("#privacy-statement").inner_text()
    model = expected["model"]
    assert f"model {model['id']}" in statement and "differential privacy" in statement
    assert f"ε = {epsilon_text(model['epsilon'])}" in statement
    assert "record (one patient)" in statement
    report = f"/v1/jobs/{service['job']['id']}/privacy-report"
    assert page.locator("#privacy-statement a").get_attribute("href") == (
        f"/dashboard/privacy#report={report}"
    )

    assert page.evaluate("localStorage.length") == 0  # only the key, and only for this tab
    assert page.evaluate("Object.keys(sessionStorage)") == ["dpcrisis.apiKey"]

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
    page.goto(f"{service['base']}/dashboard/privacy")
    expect(page.locator("#page-status")).to_have_text(re.compile("role 'clinician' may not"))

    page.click("#key-forget")
    expect(page.locator("#page-status")).to_have_text(re.compile("Paste your API key"))
    assert page.evaluate("sessionStorage.length") == 0


def test_out_of_range_value_is_shown_next_to_its_field(
    service: dict[str, Any], page: Page
) -> None:
    _open(page, f"{service['base']}/dashboard", service["clinician"])
    for name, value in PATIENT.items():
        if page.locator(f"#f-{name}").evaluate("e => e.tagName") == "SELECT":
            page.select_option(f"#f-{name}", str(value))
        else:
            page.fill(f"#f-{name}", str(value))
    page.focus("#f-phq9")
    page.keyboard.press("Control+A")
    page.keyboard.type("30")
    page.keyboard.press("Enter")  # implicit submission from a text field

    field = page.locator("#f-phq9[aria-invalid='true']")
    field.wait_for()
    error = page.locator("#f-phq9-error")
    assert error.is_visible()
    assert "[0, 27]" in error.inner_text()
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
    if names != ["age", "phq9", "gaf", "num_sessions", "substance_use", "prior_crisis"]:
        pytest.fail(f"the CSV rows above assume the seed feature order, not {names}")
    csv = tmp_path / "patients.csv"
    csv.write_text("\r\n".join(lines) + "\r\n")
    # The batch endpoint is used when the service has it; without it, one call per row.
    has_batch = service["http"].post("/v1/risk/batch", json={}).status_code not in (404, 405)
    calls: list[str] = []

    def record_post(request: Request) -> None:
        if request.method == "POST":
            calls.append(request.url.rsplit("/v1/", 1)[-1])

    page.on("request", record_post)
    _open(page, f"{service['base']}/dashboard", service["clinician"])
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

    bad = "\n".join([",".join(names), "40,30,50,5,0,0", "40,5,50,5,0,0"])
    page.fill("#csv-text", bad)
    page.click("#csv-button")
    expect(page.locator("#csv-caption")).to_have_text(re.compile(r"^Scored 1 of 2 rows"))
    refused = page.locator("#csv-table tbody tr.refused")
    assert refused.count() == 1
    assert "phq9: 30 is outside the allowed range [0, 27]" in refused.inner_text()

    page.fill("#csv-text", "age,phq9\n40,5")
    page.click("#csv-button")
    page.locator("#csv-text[aria-invalid='true']").wait_for()
    assert "gaf" in page.locator("#csv-error").inner_text()


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

    page.route("**/v1/risk/batch", no_batch)
    page.on("request", count_single)
    _open(page, f"{service['base']}/dashboard", service["clinician"])
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
    _open(page, f"{service['base']}/dashboard/privacy", service["privacy_officer"])
    row = page.locator(f"#datasets-table tr[data-dataset='{dataset['id']}']")
    assert dataset["name"] in row.inner_text()
    report = service["http"].get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    cells = row.locator("td")
    assert cells.nth(0).inner_text() == f"{report['budget']['epsilon']:g}"
    assert cells.nth(2).inner_text() == report["spent"]["epsilon_text"]
    assert "% spent" in cells.nth(4).inner_text()
    ledger = page.locator("details").first
    ledger.locator("summary").click()
    assert f"Job {job['id']}" in ledger.inner_text()
    model_row = page.locator(f"#models-table tr[data-model='{job['model_id']}']")
    assert "active" in model_row.inner_text()
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
        _open(page, f"{service['base']}/dashboard", service["clinician"])
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
