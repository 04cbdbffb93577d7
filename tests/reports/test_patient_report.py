"""Reports follow the patient: the dataset report shows the per-patient budget and its rule to
everyone who reads it; what the dataset's most-spent patients have used, and its blocks with
their sizes and spend over time, to the tables' holders (data stewards and admins) only, since
each depends on which other tables hold the dataset's patients. A model's statement names the
per-patient guarantee."""

import html
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import small_dataset
from tests.ledger.test_patient_budget import _job, _upload

HTML = {"Accept": "text/html"}


def _report(client: TestClient, dataset_id: int, **headers: str) -> Any:
    answer = client.get(f"/v1/datasets/{dataset_id}/privacy-report", headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json() if not headers else html.unescape(answer.text)


def test_each_role_reads_the_per_patient_figures_it_may(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    cohort = [f"p-{i}" for i in range(1000)]
    first = _upload(client, cohort, "first")
    assert _job(client, first, 3).status_code == 202
    second = _upload(client, cohort[:600] + [f"q-{i}" for i in range(400)], "second", seed=1)

    steward = _report(client_as("data_steward"), second)["patient_budget"]
    assert steward["space"] == "organisation" and steward["epsilon"] == 8
    assert "across the organisation's tables" in steward["statement"]
    # The second table's next release is bounded by its patients shared with the first.
    first_report = _report(client, first)["patient_budget"]
    assert first_report["spent_epsilon"] > 0
    assert steward["spent_epsilon"] == pytest.approx(first_report["spent_epsilon"])
    assert steward["remaining_epsilon"] == pytest.approx(8 - steward["spent_epsilon"])
    blocks = {tuple(b["datasets"]): b for b in steward["blocks"]}
    assert set(blocks) == {(first, second), (second,)}
    assert blocks[(first, second)]["size"] == 600 and blocks[(second,)]["size"] == 400
    shared = blocks[(first, second)]
    assert shared["live"] and [p["dataset_id"] for p in shared["timeline"]] == [first]
    assert shared["spent_epsilon"] == pytest.approx(steward["spent_epsilon"])
    assert blocks[(second,)]["spent_epsilon"] == 0 and blocks[(second,)]["timeline"] == []
    # The first table's history: the block it was alone in was split by the second upload.
    history = {(tuple(b["datasets"]), b["live"]) for b in first_report["blocks"]}
    assert history == {((first,), False), ((first,), True), ((first, second), True)}

    assert steward["withheld"] is None
    # Which tables share patients, and every spend that depends on it: the holders' facts.
    for role in ("privacy_officer", "data_scientist"):
        other = _report(client_as(role), second)["patient_budget"]
        assert other["blocks"] is None and other["withheld"], role
        assert other["spent_epsilon"] is None and other["remaining_epsilon"] is None, role
        assert other["statement"] == steward["statement"] and other["epsilon"] == 8


def test_the_page_shows_the_per_patient_section_as_the_json_does(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    cohort = [f"h-{i}" for i in range(800)]
    first = _upload(client, cohort, "first")
    assert _job(client, first, 2).status_code == 202
    second = _upload(client, cohort[:500] + [f"k-{i}" for i in range(300)], "second", seed=1)
    steward = _report(client_as("data_steward"), second, **HTML)
    assert "Per-patient budget" in steward and "Patients (exact)" in steward
    assert "across the organisation's tables" in steward
    officer = _report(client_as("privacy_officer"), second, **HTML)
    assert "Per-patient budget" in officer and "The blocks'" not in officer
    scientist = _report(client_as("data_scientist"), second, **HTML)
    assert "Per-patient budget" in scientist and "The blocks'" not in scientist


def test_a_generator_has_its_seeds_space_and_a_public_dataset_none(
    client: TestClient,
) -> None:
    synthetic = client.post("/v1/datasets", json=small_dataset()).json()
    own = _report(client, synthetic["id"])["patient_budget"]
    assert own["space"] == "generator" and own["epsilon"] == 10
    assert "every generator dataset of this seed" in own["statement"]
    assert [(b["datasets"], b["size"]) for b in own["blocks"]] == [([synthetic["id"]], 2000)]
    public = client.post("/v1/datasets", json=small_dataset(public=True, privacy_budget=None))
    assert public.status_code == 201, public.text
    assert _report(client, public.json()["id"])["patient_budget"] is None


@pytest.mark.slow  # trains one model
def test_a_models_statement_names_the_per_patient_guarantee(
    client: TestClient, run_worker: Any
) -> None:
    dataset = _upload(client, [f"m-{i}" for i in range(2000)], "trained")
    job = _job(client, dataset, 3)
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    model_id = client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    statement = client.get(f"/v1/models/{model_id}").json()["privacy"]["statement"]
    assert statement.endswith(
        "Each patient's records across the organisation's tables are protected at (epsilon 8, "
        "delta 1e-06) per patient: every release on any table that holds a patient counts "
        "against that one budget, and a release leaves out the patients whose own history "
        "cannot afford it (a per-patient Rényi filter, Feldman and Zrnic 2021)."), statement
    assert client.put("/v1/patient-budget", json={"epsilon": 9, "delta": 1e-6}).status_code == 200
    again = client.get(f"/v1/models/{model_id}").json()["privacy"]["statement"]
    assert "(epsilon 9, delta 1e-06) per patient" in again
    listed = client.get("/v1/models").json()["items"]
    assert "(epsilon 9, delta 1e-06) per patient" in listed[0]["privacy"]["statement"]
