"""The audit log: each action recorded once with its actor and role, in the action's own
transaction; scoring recorded as a count, never with a feature value; read-only, paginated and
filtered at ``GET /v1/audit-log`` for admins, privacy officers and data stewards (an upload's
intake facts only for the tables' holders)."""

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.database import get_database
from app.core.settings import settings
from app.features import FEATURE_NAMES
from tests.api.scoring_helpers import QUICK_JOB, problem
from tests.cdshooks.test_cds_hooks import URL as CDS_URL
from tests.cdshooks.test_cds_hooks import hook_call
from tests.conftest import PATIENT, SMALL_DATASET
from tests.datasets.test_upload_api import _csv, _put, _register, _rows

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

# Values no other audited number takes (ids, counts and budgets here are small or round).
DISTINCT = {"age": 67, "phq9": 23, "gaf": 41, "num_sessions": 29, "substance_use": 0,
            "prior_crisis": 1}
OTHER = {"age": 58, "phq9": 17, "gaf": 53, "num_sessions": 37, "substance_use": 1,
         "prior_crisis": 0}
SENT_VALUES = {v for p in (DISTINCT, OTHER, PATIENT) for k, v in p.items()
               if k not in ("substance_use", "prior_crisis")}


def _events(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/audit-log", params={"limit": 200, **params})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def _one(client: TestClient, action: str) -> dict[str, Any]:
    events = _events(client, action=action)
    assert len(events) == 1, events
    return events[0]


def test_actions_are_recorded_with_actor_and_role(
    any_client: TestClient, client_as: Callable[[str | None], TestClient], run_worker: Any
) -> None:
    scientist, officer = client_as("data_scientist"), client_as("privacy_officer")
    steward = client_as("data_steward")
    dataset = steward.post("/v1/datasets", json=SMALL_DATASET,
                           headers={"Idempotency-Key": "ds-1"})
    assert dataset.status_code == 201, dataset.text
    assert steward.post("/v1/datasets", json=SMALL_DATASET,
                        headers={"Idempotency-Key": "ds-1"}).status_code == 201  # a replay
    dataset_id = dataset.json()["id"]
    job = scientist.post("/v1/jobs", json={"dataset_id": dataset_id, **QUICK_JOB})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    model_id = scientist.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    queued = scientist.post("/v1/jobs", json={"dataset_id": dataset_id, **QUICK_JOB}).json()
    assert scientist.post(f"/v1/jobs/{queued['id']}/cancel").status_code == 200
    refused = scientist.post("/v1/jobs", json={"dataset_id": dataset_id,
                                               "privacy": {"target_epsilon": 50}})
    problem(refused, 409)  # over budget: nothing happened, nothing is recorded
    assert scientist.post(f"/v1/models/{model_id}/activate").status_code == 200
    budget = any_client.put(f"/v1/datasets/{dataset_id}/privacy-budget",
                            json={"epsilon": 12, "delta": 1e-5})
    assert budget.status_code == 200, budget.text
    assert officer.get(f"/v1/datasets/{dataset_id}/ledger/verify").status_code == 200

    registered = _one(officer, "dataset.registered")
    assert registered["role"] == "data_steward" and registered["actor"].startswith("test-")
    assert registered["target"] == f"dataset/{dataset_id}"
    assert registered["detail"]["budget"] == {"epsilon": 10.0, "delta": 1e-5}
    submitted = _events(officer, action="job.submitted")
    assert [e["target"] for e in submitted] == [f"job/{queued['id']}", f"job/{job.json()['id']}"]
    assert {e["role"] for e in submitted} == {"data_scientist"}
    assert len({e["actor"] for e in submitted} | {registered["actor"]}) == 2
    assert _one(officer, "job.cancelled")["detail"] == {"status": "cancelled"}
    assert _one(officer, "model.activated")["target"] == f"model/{model_id}"
    changed = _one(officer, "budget.changed")
    assert changed["role"] == "admin" and changed["actor"] == "test-admin"
    assert changed["detail"] == {"from": {"epsilon": 10.0, "delta": 1e-5},
                                 "to": {"epsilon": 12.0, "delta": 1e-5}}
    verified = _one(officer, "ledger.verified")
    assert verified["role"] == "privacy_officer" and verified["detail"]["valid"] is True
    by_http = [e for e in _events(officer) if e["actor"] != "cli"]  # cli: the fixtures' keys
    assert len(by_http) == 7
    assert all(e["api_key_id"] and e["request_id"] and e["at"] for e in by_http), by_http


def test_scoring_records_a_count_and_never_a_feature(
    any_client: TestClient, client_as: Callable[[str | None], TestClient], run_worker: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    scientist, clinician = client_as("data_scientist"), client_as("clinician")
    dataset = any_client.post("/v1/datasets", json=SMALL_DATASET).json()
    scientist.post("/v1/jobs", json={"dataset_id": dataset["id"], **QUICK_JOB})
    assert run_worker() == 1
    with caplog.at_level(logging.DEBUG):
        assert clinician.post("/v1/risk", json={"features": DISTINCT}).status_code == 200
        batch = {"patients": [{"id": "a", "features": DISTINCT}, {"id": "b", "features": OTHER},
                              {"id": "c", "features": PATIENT}]}
        assert clinician.post("/v1/risk/batch", json=batch).status_code == 200
        assert clinician.post("/v1/risk/fhir", json={"features": OTHER}).status_code == 200
        assert clinician.post(CDS_URL, json=hook_call()).status_code == 200
        problem(clinician.post("/v1/risk", json={"features": DISTINCT, "model_id": 999}), 404)

    scored = _events(any_client, action="risk.scored")
    assert [(e["detail"]["endpoint"], e["detail"]["patients"]) for e in reversed(scored)] == [
        ("risk", 1), ("risk/batch", 3), ("risk/fhir", 1), ("cds-services", 1)]
    assert {e["role"] for e in scored} == {"clinician"}
    assert {e["target"] for e in scored} == {"model/1"}

    with get_database().engine.connect() as conn:  # the rows as stored, not only as served
        rows = [dict(r) for r in conn.execute(text(
            "SELECT actor, role, action, target, detail, api_key_id FROM audit_event "
            "WHERE action = 'risk.scored'")).mappings()]
    assert len(rows) == 4
    for row in rows:
        stored = json.dumps(row, default=str)
        assert not any(name in stored for name in FEATURE_NAMES), stored
        # The actor is the key's name, whose random hex suffix may hold any digits.
        unnamed = json.dumps({k: v for k, v in row.items() if k != "actor"}, default=str)
        numbers = {float(n) for n in re.findall(r"\d+(?:\.\d+)?", unnamed)}
        assert not numbers & SENT_VALUES, stored
    logged = caplog.text
    assert not any(name in logged for name in FEATURE_NAMES), logged


def test_audit_log_pages_filters_and_is_read_only(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    for n in range(3):
        assert client.post("/v1/keys", json={"name": f"k{n}", "role": "clinician"}
                           ).status_code == 201
    assert client.delete("/v1/keys/2").status_code == 200  # k0 (key 1 is the test's admin)
    page = client.get("/v1/audit-log", params={"limit": 2, "offset": 1}).json()
    assert page["total"] == 5 and page["limit"] == 2 and page["offset"] == 1  # 4 + the fixture's
    assert [e["action"] for e in page["items"]] == ["key.created", "key.created"]
    revoked = _one(client, "key.revoked")
    assert revoked["target"] == "key/2" and revoked["detail"] == {"name": "k0",
                                                                  "role": "clinician"}
    assert {e["actor"] for e in _events(client, actor="test-admin")} == {"test-admin"}
    problem(client.get("/v1/audit-log", params={"action": "nope"}), 422, field="action")
    problem(client_as("clinician").get("/v1/audit-log"), 403)
    problem(client_as("data_scientist").get("/v1/audit-log"), 403)
    assert client_as("privacy_officer").get("/v1/audit-log").status_code == 200
    assert client.post("/v1/audit-log", json={}).status_code == 405
    assert client.delete("/v1/audit-log").status_code == 405


def test_an_uploads_intake_facts_reach_only_the_tables_holders(
    client: TestClient, client_as: Callable[[str | None], TestClient],
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upload's event keeps its exact imputed counts and the file's SHA-256: stewards and
    admins read them; a privacy officer sees the event, the row count and what was withheld."""
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    dataset = _register(client)
    rows = _rows(400)
    rows[0] = rows[0].rsplit(",", 2)[0] + ",,0"  # one imputed value
    assert _put(client, dataset["id"], _csv(rows)).status_code == 200
    steward = _one(client_as("data_steward"), "dataset.data_uploaded")["detail"]
    assert steward["imputed"]["prior_crisis"] == 1 and len(steward["table_sha256"]) == 64
    assert steward["patients"]["patients"] == 400  # its overlap with earlier uploads
    officer = _one(client_as("privacy_officer"), "dataset.data_uploaded")["detail"]
    assert officer == {"rows": 400, "withheld": ["imputed", "patients", "table_sha256"]}
