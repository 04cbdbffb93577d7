"""Retraining from a monitoring run and a champion/challenger comparison through the API: the
retrained model is a job on the follow-up with the model's recipe, and the comparison is one
DP release on the follow-up's evaluation part, charged once, whose verdict is its interval's.
(Whether the verdict finds a better model beyond the noise is tested on releases of known
AUCs in tests/worker/test_comparison_release.py: on the generator's shifted follow-up, the
best possible model ranks at 0.77 against the old model's 0.70, closer than a follow-up's
evaluation part resolves at these sizes.)"""

from typing import Any

import pytest
from dp_accounting import GaussianDpEvent
from dp_accounting.pld import PLDAccountant
from fastapi.testclient import TestClient

from tests.api.scoring_helpers import problem

pytestmark = pytest.mark.slow

TRAIN = {"name": "cohort 2025", "source": {"kind": "synthetic", "n_rows": 40000, "seed": 5},
         "privacy_budget": {"epsilon": 10.0, "delta": 1e-6}}
JOB = {"privacy": {"target_epsilon": 3.0}, "training": {"seed": 7}}


def _post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(path, json=body)
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


@pytest.fixture
def shifted(client: TestClient, run_worker: Any) -> dict[str, int]:
    """A model, a shifted follow-up of it and a monitoring run on that follow-up."""
    dataset = client.post("/v1/datasets", json=TRAIN)
    assert dataset.status_code == 201, dataset.text
    job = _post(client, "/v1/jobs", {"dataset_id": dataset.json()["id"], **JOB})
    assert run_worker() == 1
    model = int(client.get(f"/v1/jobs/{job['id']}").json()["model_id"])
    follow = client.post("/v1/datasets", json={
        "name": "follow-up", "privacy_budget": {"epsilon": 15.0, "delta": 1e-7},
        "source": {"kind": "synthetic", "n_rows": 120000, "seed": 41,
                   "shift": "phq9_and_outcome"},
        "follow_up": {"model_id": model, "period_start": "2026-01-01",
                      "period_end": "2026-06-30"}})
    assert follow.status_code == 201, follow.text
    run = _post(client, f"/v1/models/{model}/monitoring-runs",
                {"dataset_id": follow.json()["id"], "privacy": {"target_epsilon": 1.0}})
    assert run_worker() == 1
    return {"model": model, "follow_up": int(follow.json()["id"]), "run": int(run["id"]),
            "job": int(job["id"])}


def test_retrain_then_compare_on_the_follow_up(
        client: TestClient, run_worker: Any, shifted: dict[str, int]) -> None:
    retrain = client.post(f"/v1/monitoring-runs/{shifted['run']}/retrain")
    assert retrain.status_code == 202, retrain.text
    assert retrain.headers["Location"] == f"/v1/jobs/{retrain.json()['id']}"
    own = client.get(f"/v1/jobs/{shifted['job']}").json()
    job = retrain.json()
    assert job["dataset_id"] == shifted["follow_up"]
    assert job["privacy"]["target_epsilon"] == own["privacy"]["target_epsilon"] == 3.0
    assert job["training"]["seed"] == 7 and job["training"]["model"] == own["training"]["model"]
    assert run_worker() == 1
    challenger = client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    assert challenger is not None

    queued = _post(client, f"/v1/models/{shifted['model']}/comparisons", {
        "challenger_id": challenger, "dataset_id": shifted["follow_up"],
        "privacy": {"target_epsilon": 6.0}})
    assert queued["status"] == "queued" and queued["verdict"] is None
    assert run_worker() == 1
    done = client.get(f"/v1/comparisons/{queued['id']}")
    assert done.status_code == 200, done.text
    found = done.json()
    assert found["status"] == "succeeded", found
    auc = found["difference"]["overall"]["roc_auc"]
    assert found["verdict"] == auc["verdict"], auc
    assert auc["reference"] == found["champion"]["roc_auc"]
    assert auc["follow_up"] == found["challenger"]["roc_auc"]
    low, high = auc["change_ci"]
    assert low <= auc["change"] + 0.05 and auc["change"] - 0.05 <= high
    assert auc["verdict"] == ("better" if low > 0 else "worse" if high < 0 else
                              auc["verdict"]), auc
    assert {g["grouping"] for g in found["difference"]["subgroups"]} == {"age", "sex"}
    groupings = len(found["champion"]["release"]["histograms"]["by_grouping"])
    assert found["l2_sensitivity"] == pytest.approx((2 * (1 + groupings)) ** 0.5, abs=1e-4)

    # Charged once on the follow-up's ledger, as its one Gaussian release
    entries = client.get(f"/v1/datasets/{shifted['follow_up']}/privacy-report").json()["entries"]
    assert len(entries) == 3  # the monitoring run, the retraining job, the comparison
    accountant = PLDAccountant()
    accountant.compose(GaussianDpEvent(found["noise_multiplier"]))
    independent = accountant.get_epsilon(1e-7)
    assert independent <= 6.0 + 1e-6
    assert entries[-1]["epsilon"]["pld"] >= independent - 1e-4


def test_refusals_name_the_field(client: TestClient, run_worker: Any,
                                 shifted: dict[str, int]) -> None:
    model, follow_up = shifted["model"], shifted["follow_up"]
    before = client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"]
    body = {"challenger_id": model, "dataset_id": follow_up, "privacy": {"target_epsilon": 1.0}}
    problem(client.post(f"/v1/models/{model}/comparisons", json=body), 422,
            field="challenger_id")
    problem(client.post(f"/v1/models/{model}/comparisons",
                        json={**body, "challenger_id": 999999}), 404)
    problem(client.post(f"/v1/models/{model}/comparisons",
                        json={**body, "privacy": {"target_epsilon": 1000}}), 422,
            field="privacy.target_epsilon")
    problem(client.post("/v1/monitoring-runs/999999/retrain"), 404)
    problem(client.post(f"/v1/monitoring-runs/{shifted['run']}/retrain",
                        json={"privacy": {"target_epsilon": 0}}), 422,
            field="privacy.target_epsilon")
    problem(client.get(f"/v1/comparisons/{shifted['job']}"), 404)  # a training job
    assert client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"] == before
