"""Monitoring runs through the API: follow-ups registered, one DP release per run charged to the
follow-up's ledger, drift flagged on the generator's documented shift and not without it."""

from typing import Any

import pytest
from dp_accounting import GaussianDpEvent
from dp_accounting.pld import PLDAccountant
from fastapi.testclient import TestClient

from tests.api.scoring_helpers import problem

pytestmark = pytest.mark.slow

TRAIN = {"name": "cohort 2025", "source": {"kind": "synthetic", "n_rows": 100000, "seed": 5},
         "privacy_budget": {"epsilon": 10.0, "delta": 1e-7}}
JOB = {"privacy": {"target_epsilon": 3.0}}


def _follow_up(client: TestClient, model_id: int, seed: int, shift: str | None = None,
               n_rows: int = 50000, epsilon: float = 10.0) -> int:
    source: dict[str, Any] = {"kind": "synthetic", "n_rows": n_rows, "seed": seed}
    if shift:
        source["shift"] = shift
    created = client.post("/v1/datasets", json={
        "name": f"follow-up {seed}", "source": source,
        "privacy_budget": {"epsilon": epsilon, "delta": 1e-6},
        "follow_up": {"model_id": model_id, "period_start": "2026-01-01",
                      "period_end": "2026-06-30"}})
    assert created.status_code == 201, created.text
    assert created.json()["follow_up"] == {"model_id": model_id, "period_start": "2026-01-01",
                                           "period_end": "2026-06-30", "labelled": True}
    return int(created.json()["id"])


@pytest.fixture
def model_id(client: TestClient, run_worker: Any) -> int:
    dataset = client.post("/v1/datasets", json=TRAIN)
    assert dataset.status_code == 201, dataset.text
    job = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **JOB})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    return int(client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"])


def _run(client: TestClient, run_worker: Any, model_id: int, dataset_id: int,
         epsilon: float = 8.0) -> dict[str, Any]:
    queued = client.post(f"/v1/models/{model_id}/monitoring-runs",
                         json={"dataset_id": dataset_id, "privacy": {"target_epsilon": epsilon}})
    assert queued.status_code == 202, queued.text
    assert queued.headers["Location"] == f"/v1/monitoring-runs/{queued.json()['id']}"
    assert queued.json()["status"] == "queued"
    assert run_worker() == 1
    done = client.get(queued.headers["Location"])
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "succeeded", done.json()
    return dict(done.json())


def test_a_shift_is_flagged_and_its_absence_is_not(client: TestClient, run_worker: Any,
                                                   model_id: int) -> None:
    shifted = _run(client, run_worker, model_id, _follow_up(client, model_id, 41,
                                                            "phq9_and_outcome"))
    features = {f["name"]: f for f in shifted["features"]}
    assert features["phq9"]["verdict"] == "drift", features["phq9"]
    assert features["phq9"]["psi_ci"][0] > 0
    assert shifted["features"][0]["name"] == "phq9"  # sorted by PSI, largest first
    drift = shifted["performance"]["drift"]["overall"]["roc_auc"]
    assert drift["verdict"] == "worse" and drift["change_ci"][1] < 0, drift
    assert shifted["roc_auc"] is not None and shifted["roc_auc_ci"] is not None

    same = _run(client, run_worker, model_id, _follow_up(client, model_id, 42))
    assert [f["name"] for f in same["features"] if f["verdict"] == "drift"] == []
    auc = same["performance"]["drift"]["overall"]["roc_auc"]
    # One run's verdict can be a false alarm (ROC-AUC "worse" on about 3% of unshifted
    # follow-ups of this size: tests/worker/test_monitoring_false_alarms.py bounds the rate over
    # repeated runs); the change itself stays far below the shift's.
    assert abs(auc["change"]) < 0.05 < abs(drift["change"]), (auc, drift)
    assert same["reference_release_id"] == shifted["reference_release_id"] is not None

    timeline = client.get(f"/v1/models/{model_id}/monitoring")
    assert [r["id"] for r in timeline.json()["runs"]] == [shifted["id"], same["id"]]
    page = client.get(f"/v1/models/{model_id}/monitoring", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "phq9" in page.text


def test_a_run_is_charged_once_as_its_one_gaussian_release(client: TestClient,
                                                           run_worker: Any,
                                                           model_id: int) -> None:
    follow_up = _follow_up(client, model_id, 43)
    run = _run(client, run_worker, model_id, follow_up, epsilon=1.0)
    entries = client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"]
    assert len(entries) == 1
    noise = run["privacy"]["noise_multiplier"]
    accountant = PLDAccountant()
    accountant.compose(GaussianDpEvent(noise))
    independent = accountant.get_epsilon(1e-6)
    assert independent <= 1.0 + 1e-6
    charged = entries[0]["epsilon"]
    assert charged["pld"] >= independent - 1e-4, (charged, independent)  # never below
    assert charged["pld"] <= 1.0 + 1e-3 and charged["rdp"] >= charged["pld"]
    assert entries[0]["job_id"] == run["job_id"]


def test_bad_runs_are_refused_and_charge_nothing(client: TestClient, run_worker: Any,
                                                 model_id: int) -> None:
    training = client.get(f"/v1/models/{model_id}").json()["dataset_id"]
    problem(client.post(f"/v1/models/{model_id}/monitoring-runs", json={
        "dataset_id": training, "privacy": {"target_epsilon": 1.0}}), 422, field="dataset_id")
    problem(client.post("/v1/models/999999/monitoring-runs", json={
        "dataset_id": training, "privacy": {"target_epsilon": 1.0}}), 404)
    poor = _follow_up(client, model_id, 44, epsilon=0.5)
    problem(client.post(f"/v1/models/{model_id}/monitoring-runs", json={
        "dataset_id": poor, "privacy": {"target_epsilon": 2.0}}), 409)
    assert client.get(f"/v1/datasets/{poor}/privacy-report").json()["entries"] == []
    problem(client.post(f"/v1/models/{model_id}/monitoring-runs", json={
        "dataset_id": poor, "privacy": {"target_epsilon": 1000}}), 422,
        field="privacy.target_epsilon")
