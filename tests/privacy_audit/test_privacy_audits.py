"""Privacy audits through the API: submit, run on the shared queue, report, refuse, alarm."""

import logging
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from app.core.database import Database
from tests.conftest import small_dataset
from worker.dpsgd import DPSGD
from worker.runner import Worker

PUBLIC = {"name": "public", "source": {"kind": "synthetic", "n_rows": 600, "seed": 21},
          "public": True}
QUICK = {"canaries": 200, "shadow_models": 2, "seed": 1}


def _job_on(client: TestClient, dataset: dict[str, Any], epsilon: float = 1.0) -> dict[str, Any]:
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                        "privacy": {"target_epsilon": epsilon},
                                        "training": {"epochs": 100}})
    assert job.status_code == 202, job.text
    return job.json()


def _public_job(client: TestClient) -> dict[str, Any]:
    dataset = client.post("/v1/datasets", json=PUBLIC)
    assert dataset.status_code == 201, dataset.text
    return _job_on(client, dataset.json())


def test_audit_flow_report_and_dataset_link(any_client: TestClient, run_worker: Any) -> None:
    job = _public_job(any_client)
    submitted = any_client.post("/v1/audits", json={"job_id": job["id"], **QUICK})
    assert submitted.status_code == 202, submitted.text
    audit = submitted.json()
    assert submitted.headers["location"] == f"/v1/audits/{audit['id']}"
    assert audit["status"] == "queued" and audit["audited_job_id"] == job["id"]
    assert audit["accounted_epsilon"] <= 1.0 and audit["audited_epsilon"] is None
    # Audits share the queue but not the jobs list.
    assert [j["id"] for j in any_client.get("/v1/jobs").json()["items"]] == [job["id"]]

    assert run_worker() == 2  # the training job, then the audit
    done = any_client.get(f"/v1/audits/{audit['id']}").json()
    assert done["status"] == "succeeded", done
    assert 0.0 <= done["audited_epsilon"] <= done["accounted_epsilon"] and not done["alarm"]
    stored = any_client.get(f"/v1/jobs/{audit['id']}").json()["metrics"]  # typed AuditResults
    assert stored["audited_epsilon"] == done["audited_epsilon"] and stored["settings"]["steps"]

    report = any_client.get(f"/v1/audits/{audit['id']}/report").json()
    assert report["epsilon"]["audited"] == done["audited_epsilon"]
    assert report["epsilon"]["accounted"] == pytest.approx(done["accounted_epsilon"])
    assert set(report["one_run"]) == {"white_box", "black_box"}
    assert report["one_run"]["white_box"]["canaries"] == QUICK["canaries"]
    for model in ("dp", "non_private"):
        for attack in ("loss", "lira"):
            assert 0.0 <= report["attack_auc"][model][attack] <= 1.0
            assert report["membership"][model][attack]["roc"]
    assert "Not charged to the ledger" in report["ledger"]

    page = any_client.get(f"/v1/audits/{audit['id']}/report", headers={"Accept": "text/html"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="attack-roc"' in page.text and "accounted ε ≤" in page.text
    assert "PRIVACY BUG" not in page.text

    ledger = any_client.get(f"/v1/datasets/{job['dataset_id']}/privacy-report").json()
    assert [a["id"] for a in ledger["privacy_audits"]] == [audit["id"]]
    assert ledger["entries"][0]["job_id"] == job["id"] and len(ledger["entries"]) == 1
    dataset_page = any_client.get(f"/v1/datasets/{job['dataset_id']}/privacy-report",
                                  headers={"Accept": "text/html"}).text
    assert f'href="/v1/audits/{audit["id"]}/report"' in dataset_page


def test_audits_of_protected_datasets_are_refused(client: TestClient) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    job = _job_on(client, dataset)
    refused = client.post("/v1/audits", json={"job_id": job["id"], **QUICK})
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert problem["type"].endswith("/audit-needs-public-data")
    assert problem["errors"][0]["field"] == "job_id"
    missing = client.post("/v1/audits", json={"job_id": 999, **QUICK})
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "job_id"
    small = client.post("/v1/audits", json={"job_id": job["id"], "canaries": 2})
    assert small.status_code == 422 and small.json()["errors"][0]["field"] == "canaries"
    assert client.get("/v1/audits/999").status_code == 404
    assert client.get(f"/v1/audits/{job['id']}").status_code == 404  # a training job


def test_planted_privacy_bug_fails_the_audit_loudly(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Test-only hook: the engine adds a twentieth of its noise while the accountant is told
    the full noise multiplier. The white-box audit must catch it."""
    job = _public_job(client)
    draw = DPSGD.draw_noise

    def weak_noise(self: DPSGD, steps: int) -> list[torch.Tensor | None]:
        return [None if n is None else n.mul_(0.05) for n in draw(self, steps)]

    monkeypatch.setattr(DPSGD, "draw_noise", weak_noise)
    audit = client.post("/v1/audits", json={"job_id": job["id"], **QUICK}).json()
    with caplog.at_level(logging.ERROR, logger="dpcrisis.worker"):
        run_worker()
    done = client.get(f"/v1/audits/{audit['id']}").json()
    assert done["status"] == "failed" and done["alarm"]
    assert done["error"]["code"] == "privacy_bug_detected"
    assert done["audited_epsilon"] > done["accounted_epsilon"]
    assert any("privacy bug" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)
    page = client.get(f"/v1/audits/{audit['id']}/report", headers={"Accept": "text/html"}).text
    assert 'class="summary alarm"' in page and "PRIVACY BUG DETECTED" in page
    dataset_page = client.get(f"/v1/datasets/{job['dataset_id']}/privacy-report",
                              headers={"Accept": "text/html"}).text
    assert '<span class="alarm">PRIVACY BUG</span>' in dataset_page


def test_an_audit_stops_between_trainings(client: TestClient, db: Database) -> None:
    """A stopping worker ends a claimed audit as cancelled at its next checkpoint."""
    job = _public_job(client)
    audit = client.post("/v1/audits", json={"job_id": job["id"], **QUICK}).json()
    worker = Worker(database=db, worker_id="stopping-worker")
    worker.stop_requested.set()
    while worker.run_once():
        pass
    done = client.get(f"/v1/audits/{audit['id']}").json()
    assert done["status"] == "cancelled" and done["error"]["code"] == "worker_stopping"
    assert done["audited_epsilon"] is None and not done["alarm"]
