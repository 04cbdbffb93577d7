"""One served process and one headless Chromium for all the dashboard's browser tests.

The service holds two trained models: the built-in crisis schema's (model 1, active: the first
model stored is activated) and a clinic's own declared schema's (an upload with a categorical
feature, not active), so the tests can check that the form, the CSV columns and the explanation
labels follow whichever model scores. A test that activates another model puts model 1 back.
"""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, Response, sync_playwright

from bench.processes import api_client, server_log, start_server, stop, wait_ready
from tests.browser.helpers import CHROMIUM
from tests.conftest import FAST_TRAINING, SMALL_DATASET
from tests.e2e.cohort import CLINIC_SCHEMA, PARQUET, clinic_parquet, register_upload


def _train(http: httpx.Client, process: Any, dataset_id: int) -> dict[str, Any]:
    job = http.post("/v1/jobs", json={"dataset_id": dataset_id,
                                      "privacy": {"target_epsilon": 3},
                                      "training": FAST_TRAINING})
    assert job.status_code == 202, job.text
    deadline = time.monotonic() + 120
    while (state := http.get(job.headers["location"]).json())["status"] in ("queued",
                                                                           "running"):
        assert time.monotonic() < deadline, state
        assert process.poll() is None, server_log(process)
        time.sleep(0.2)
    assert state["status"] == "succeeded", state
    return state


@pytest.fixture(scope="package")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A served app with a crisis model (active) and a clinic-schema model; ids, keys, URL."""
    root = tmp_path_factory.mktemp("dashboard")
    process, base = start_server(root)  # its uploads too stay under root (service_env)
    try:
        wait_ready(process, base)
        http = api_client(base, timeout=60)  # admin
        keys = {role: http.post("/v1/keys", json={"name": role, "role": role}).json()["key"]
                for role in ("clinician", "privacy_officer")}
        dataset = http.post("/v1/datasets", json=SMALL_DATASET)
        assert dataset.status_code == 201, dataset.text
        job = _train(http, process, dataset.json()["id"])
        clinic = register_upload(http, "clinic", CLINIC_SCHEMA, clinic_parquet(seed=23), PARQUET)
        clinic_job = _train(http, process, clinic["id"])
        assert http.get("/v1/models/active").json()["id"] == job["model_id"]
        yield {"base": base, "dataset": dataset.json(), "job": job, "http": http,
               "clinic_dataset": clinic, "clinic_model": clinic_job["model_id"], **keys}
    finally:
        stop(process)


@pytest.fixture(scope="package")
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
        # Patient data stays with the API; a download link is a blob of the page itself.
        if not request.url.startswith(("http://127.0.0.1:", "blob:http://127.0.0.1:")):
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
