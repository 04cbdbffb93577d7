"""Erasure and the one headline epsilon, as the privacy page shows them in headless Chromium.

A steward erases a dataset's rows after a model was trained on them: the privacy page marks
the dataset (the ledger and the DP releases remain) and the model in the model list (a DP
release of the rows, still in use), the model's job report opens its model card with the
erasure, and each ledger shows one headline epsilon per release (PLD) with the filter's
working figure and why they differ. Leaves privacy-erased.png in helpers.ARTIFACTS.
"""

import time
from datetime import datetime
from typing import Any

import pytest

from tests.api.scoring_helpers import QUICK_JOB
from tests.browser.helpers import ARTIFACTS, assert_accessible, open_page, skip_without_chromium
from tests.conftest import SMALL_DATASET

skip_without_chromium()

from playwright.sync_api import Page, expect  # noqa: E402

pytestmark = pytest.mark.slow


def _erased_model(service: dict[str, Any]) -> dict[str, Any]:
    """A dataset of its own with one trained model, its rows then erased."""
    http = service["http"]
    body = {**SMALL_DATASET, "name": "erased-clinic",
            "source": {**SMALL_DATASET["source"], "seed": 4711}}  # type: ignore[dict-item]
    dataset = http.post("/v1/datasets", json=body)
    assert dataset.status_code == 201, dataset.text
    job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **QUICK_JOB})
    assert job.status_code == 202, job.text
    deadline = time.monotonic() + 120
    while (state := http.get(job.headers["location"]).json())["status"] in ("queued",
                                                                           "running"):
        assert time.monotonic() < deadline, state
        time.sleep(0.2)
    assert state["status"] == "succeeded", state
    erased = http.delete(f"/v1/datasets/{dataset.json()['id']}/data")
    assert erased.status_code == 200, erased.text
    at = datetime.fromisoformat(erased.json()["data_erased_at"].replace("Z", "+00:00"))
    return {"dataset_id": dataset.json()["id"], "job_id": state["id"],
            "model_id": state["model_id"], "day": at.date().isoformat()}


def test_the_privacy_page_marks_erased_rows_and_shows_one_epsilon_per_release(
    service: dict[str, Any], page: Page
) -> None:
    erased = _erased_model(service)
    day = erased["day"]
    open_page(page, f"{service['base']}/dashboard/privacy", service["privacy_officer"])

    dataset_row = page.locator(f"#datasets-table tr[data-dataset='{erased['dataset_id']}']")
    expect(dataset_row).to_have_attribute("data-erased", "true")
    expect(dataset_row).to_contain_text(
        f"Rows erased on {day}: the ledger and the DP releases remain.")
    kept = page.locator(f"#datasets-table tr[data-dataset='{service['dataset']['id']}']")
    assert kept.get_attribute("data-erased") is None and "erased" not in kept.inner_text()

    model_row = page.locator(f"#models-table tr[data-model='{erased['model_id']}']")
    expect(model_row).to_have_attribute("data-erased", "true")
    expect(model_row).to_contain_text(f"erased on {day}: the model, a DP release of them, "
                                      "remains in use under its guarantee")
    other = page.locator(f"#models-table tr[data-model='{service['job']['model_id']}']")
    expect(other).to_contain_text("not erased")
    headers = page.locator("#models-table thead th").all_inner_texts()
    assert "ε (PLD)" in headers and "ε (RDP)" not in headers and "Training rows" in headers

    ledger = page.locator(f"details[data-dataset='{erased['dataset_id']}']")
    ledger.locator("summary").click()
    expect(ledger).to_contain_text(f"Rows erased on {day}")
    columns = ledger.locator("thead th").all_inner_texts()
    assert [c for c in columns if "ε" in c] == ["ε (PLD)", "Spent ε after (composed)"], columns
    assert any(c.startswith("Filter's RDP at order ") for c in columns), columns
    expect(ledger).to_contain_text("Each release's ε is its headline guarantee")
    assert_accessible(page, "the privacy page with an erased dataset")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "privacy-erased.png"), full_page=True)

    # The model's job report, shown here: its model card opens with the erasure.
    page.goto(f"{service['base']}/dashboard/privacy#report=/v1/jobs/{erased['job_id']}"
              "/privacy-report")
    card = page.locator("#report #model-card")
    expect(card.locator(".erased")).to_have_text(
        f"The training rows were erased on {day}; this model is a DP release of them and "
        "remains in use under its guarantee.")


def test_the_scoring_page_names_a_model_whose_rows_were_erased(
    service: dict[str, Any], page: Page
) -> None:
    models = service["http"].get("/v1/models?limit=200").json()["items"]
    erased = [m for m in models if m["training_rows_erased_at"]]
    if not erased:
        erased = [service["http"].get(f"/v1/models/{_erased_model(service)['model_id']}")
                  .json()]
    model = erased[0]
    open_page(page, f"{service['base']}/dashboard", service["clinician"])
    option = page.locator(f"#model-select option[value='{model['id']}']")
    day = model["training_rows_erased_at"][:10]
    expect(option).to_contain_text(f"training rows erased {day} (the model remains)")
    kept = page.locator(f"#model-select option[value='{service['job']['model_id']}']")
    assert "erased" not in kept.inner_text()
