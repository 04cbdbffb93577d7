"""The README walk-through, driven through the API on SQLite and PostgreSQL."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import FAST_TRAINING, PATIENT, small_dataset


def _create_dataset(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post("/v1/datasets", json=small_dataset(**overrides))
    assert response.status_code == 201, response.text
    return response.json()


def test_register_train_report_score(any_client: TestClient, run_worker: Any) -> None:
    dataset = _create_dataset(any_client)
    parts = ("training_rows", "calibration_rows", "evaluation_rows")  # per-record keyed coins
    assert dataset["rows"] == 2000 == sum(dataset[p] for p in parts)
    assert abs(dataset["training_rows"] - 1400) < 100

    submitted = any_client.post(
        "/v1/jobs",
        json={"dataset_id": dataset["id"], "privacy": {"target_epsilon": 3},
              "training": FAST_TRAINING},
    )
    assert submitted.status_code == 202, submitted.text
    job = submitted.json()
    assert submitted.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["model_id"] is None
    assert job["privacy"]["epsilon_planned"]["pld"] <= 3.0

    assert run_worker() == 1
    done = any_client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded", done
    assert done["progress"]["epoch"] == FAST_TRAINING["epochs"]
    assert 0 < done["progress"]["epsilon_spent"] <= 3.0
    assert done["model_id"] is not None
    release = done["metrics"]["release"]  # the evaluation: one Gaussian histogram release
    assert release["mechanism"] == "gaussian" and release["noise_multiplier"] > 0
    assert done["metrics"]["exact"] is False
    calibration = done["metrics"]["calibration"]  # DP Platt scaling on the calibration part
    assert calibration["rows"] == dataset["calibration_rows"]
    assert calibration["noise_multiplier"] > 0 and calibration["slope"] > 0

    report = any_client.get(f"/v1/jobs/{job['id']}/privacy-report").json()
    assert report["epsilon"]["pld"] <= 3.0
    assert report["epsilon"]["rdp"] >= report["epsilon"]["pld"]
    assert report["steps"] == FAST_TRAINING["epochs"] * report["steps_per_epoch"]
    assert report["sampling"] == "poisson"
    assert [e["epoch"] for e in report["epsilon_per_epoch"]] == [1, 2, 3]
    per_epoch = [e["pld"] for e in report["epsilon_per_epoch"]]
    assert per_epoch == sorted(per_epoch) and per_epoch[-1] == pytest.approx(
        report["epsilon"]["pld"], rel=1e-6
    )
    for key in ("roc_auc", "pr_auc", "brier"):
        assert key in report["metrics"]

    ledger = any_client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    assert [e["status"] for e in ledger["entries"]] == ["committed"]
    # One release: the filter charges its own tight epsilon when that is below the RDP figure.
    assert ledger["spent"]["epsilon"] == pytest.approx(
        min(report["epsilon"]["pld"], report["epsilon"]["rdp"]), rel=1e-9)
    assert ledger["remaining"]["epsilon"] == pytest.approx(10.0 - ledger["spent"]["epsilon"])

    risk = any_client.post("/v1/risk", json={"features": PATIENT})
    assert risk.status_code == 200, risk.text
    body = risk.json()
    assert 0 < body["probability"] < 1
    assert body["band"] in {"low", "medium", "high"}
    assert body["model"]["id"] == done["model_id"]
    assert body["model"]["epsilon"] == pytest.approx(report["epsilon"]["pld"])
    assert body["model"]["delta"] == 1e-5
    assert body["model"]["calibrated"] is True
    assert "calibrated on" in body["model"]["statement"]
    total = body["reference"]["log_odds"] + sum(c["contribution"] for c in body["contributions"])
    assert total == pytest.approx(body["log_odds"], abs=1e-6)
    sizes = [abs(c["contribution"]) for c in body["contributions"]]
    assert sizes == sorted(sizes, reverse=True)
    phq9 = next(c for c in body["contributions"] if c["feature"] == "phq9")
    assert phq9["reason"] == "PHQ-9 22: severe depressive symptoms (20-27)"

    named = any_client.post("/v1/risk", json={"features": PATIENT, "model_id": done["model_id"]})
    assert named.json()["probability"] == pytest.approx(body["probability"])


def test_budget_admits_until_composed_spend_would_exceed(client: TestClient) -> None:
    dataset = _create_dataset(client, privacy_budget={"epsilon": 2.0, "delta": 1e-5})
    job = {"dataset_id": dataset["id"], "privacy": {"noise_multiplier": 3.0},
           "training": FAST_TRAINING}
    statuses = [client.post("/v1/jobs", json=job).status_code for _ in range(12)]
    admitted = statuses.count(202)
    assert 1 <= admitted < 12 and statuses[:admitted] == [202] * admitted
    assert set(statuses[admitted:]) == {409}
    report = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    assert len(report["entries"]) == admitted
    assert report["spent"]["epsilon"] <= 2.0
    assert report["spent"]["naive_sum_epsilon"] >= report["spent"]["epsilon"]
    refused = client.post("/v1/jobs", json=job).json()
    assert refused["remaining_epsilon"] == pytest.approx(report["remaining"]["epsilon"])


def test_cancel_queued_job_releases_its_reservation(client: TestClient, run_worker: Any) -> None:
    dataset = _create_dataset(client)
    job = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset["id"], "privacy": {"noise_multiplier": 1.0},
              "training": FAST_TRAINING},
    ).json()
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    report = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    assert [e["status"] for e in report["entries"]] == ["released"]
    assert report["spent"]["epsilon"] == 0.0
    assert run_worker() == 0
    again = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 409
    assert again.headers["content-type"].startswith("application/problem+json")


def test_jobs_are_paginated_newest_first(client: TestClient) -> None:
    dataset = _create_dataset(client)
    ids = [
        client.post(
            "/v1/jobs",
            json={"dataset_id": dataset["id"], "privacy": {"noise_multiplier": 5.0},
                  "training": FAST_TRAINING},
        ).json()["id"]
        for _ in range(5)
    ]
    first = client.get("/v1/jobs", params={"limit": 2}).json()
    second = client.get("/v1/jobs", params={"limit": 2, "offset": 2}).json()
    assert first["total"] == 5
    assert [j["id"] for j in first["items"] + second["items"]] == ids[::-1][:4]
    queued = client.get("/v1/jobs", params={"status": "queued"}).json()
    assert queued["total"] == 5


def test_non_private_training_on_public_dataset(client: TestClient, run_worker: Any) -> None:
    dataset = _create_dataset(client, public=True, privacy_budget=None)
    job = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset["id"], "privacy": {"noise_multiplier": 0},
              "training": FAST_TRAINING},
    )
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    assert done["status"] == "succeeded"
    model = client.get(f"/v1/models/{done['model_id']}").json()
    assert model["privacy"]["non_private"] is True and model["privacy"]["epsilon"] is None
    report = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    assert report["spent"]["non_private"] is True


def test_health_and_docs(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["schema_version"]
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs", "/v1/jobs/{job_id}/privacy-report", "/v1/risk"):
        assert path in paths
