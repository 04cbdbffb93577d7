"""POST /v1/risk/batch: one vectorised core shared with /v1/risk, errors named by index,
additivity per patient, and patient features never logged."""

import json
import logging
import re
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.features import FEATURE_NAMES, LOWER, UPPER
from app.scoring.schemas import MAX_BATCH, RiskBatchResponse
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

RANGES = {"age": "[18, 80]", "phq9": "[0, 27]", "gaf": "[1, 100]", "num_sessions": "[0, 50]",
          "substance_use": "[0, 1]", "prior_crisis": "[0, 1]"}


def random_patients(n: int, seed: int = 0) -> list[dict[str, int]]:
    rng = np.random.default_rng(seed)
    rows = np.rint(rng.uniform(LOWER, UPPER, size=(n, len(FEATURE_NAMES)))).astype(int)
    return [dict(zip(FEATURE_NAMES, map(int, row), strict=True)) for row in rows]


def assert_additive(result: dict[str, Any], reference: dict[str, Any]) -> None:
    """log_odds = reference + sum(phi); probability likewise on the 0-1 scale."""
    contributions = result["contributions"]
    total = reference["log_odds"] + sum(c["contribution"] for c in contributions)
    assert total == pytest.approx(result["log_odds"], abs=1e-9)
    total_p = reference["probability"] + sum(c["contribution_probability"] for c in contributions)
    assert total_p == pytest.approx(result["probability"], abs=1e-9)
    sizes = [abs(c["contribution"]) for c in contributions]
    assert sizes == sorted(sizes, reverse=True)


def test_batch_matches_single_in_order_and_adds_up(
    any_client: TestClient, run_worker: Any
) -> None:
    (model_id,) = train_models(any_client, run_worker)
    patients = [PATIENT, *random_patients(40, seed=1)]
    body = {"patients": [{"id": f"p-{i}", "features": p} for i, p in enumerate(patients)]}
    body["patients"][3].pop("id")  # ids are optional
    response = any_client.post("/v1/risk/batch", json=body)
    assert response.status_code == 200, response.text
    batch = response.json()

    RiskBatchResponse.model_validate(batch)  # the documented shape
    assert batch["model"]["id"] == model_id and batch["model"]["statement"]
    assert batch["model"]["version"] and batch["model"]["delta"] == 1e-5
    assert batch["reference"]["features"]["phq9"] == 5
    results = batch["results"]
    assert [r["id"] for r in results] == [f"p-{i}" if i != 3 else None
                                          for i in range(len(patients))]
    for patient, result in zip(patients, results, strict=True):
        assert_additive(result, result["reference"])
        assert result["reference"]["log_odds"] == batch["reference"]["log_odds"]
        assert result["model"] == {k: batch["model"][k] for k in ("id", "version", "epsilon",
                                                                   "delta")}
        assert {c["feature"]: c["value"] for c in result["contributions"]} == patient
        assert result["band"] in ("low", "medium", "high")

    single = any_client.post("/v1/risk", json={"features": PATIENT}).json()
    first = results[0]
    assert single["probability"] == pytest.approx(first["probability"], abs=1e-12)
    for mine, theirs in zip(single["contributions"], first["contributions"], strict=True):
        exact = {k: v for k, v in mine.items() if not k.startswith("contribution")}
        assert exact == {k: v for k, v in theirs.items() if not k.startswith("contribution")}
        assert mine["contribution"] == pytest.approx(theirs["contribution"], abs=1e-12)
        assert mine["contribution_probability"] == pytest.approx(
            theirs["contribution_probability"], abs=1e-12)
    assert single["band"] == first["band"] and single["model"] == batch["model"]
    assert single["reference"] == batch["reference"]
    assert_additive(single, single["reference"])
    phq9 = next(c for c in single["contributions"] if c["feature"] == "phq9")
    assert phq9["severity"] == {"label": "severe depressive symptoms", "from": 20, "to": 27}


def test_ten_thousand_patients_in_one_call(client: TestClient, run_worker: Any) -> None:
    """A full batch is answered in order (its speed is bench/scoring_latency.py's goal)."""
    train_models(client, run_worker)
    patients = random_patients(MAX_BATCH, seed=2)
    response = client.post(
        "/v1/risk/batch", json={"patients": [{"features": p} for p in patients]}
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == MAX_BATCH
    for k in (0, 1234, MAX_BATCH - 1):
        assert {c["feature"]: c["value"] for c in results[k]["contributions"]} == patients[k]
        assert_additive(results[k], results[k]["reference"])


@pytest.mark.parametrize("count", [0, MAX_BATCH + 1])
def test_batch_size_out_of_range(client: TestClient, count: int) -> None:
    body = {"patients": [{"features": PATIENT}] * count}
    problem(client.post("/v1/risk/batch", json=body), 422, field="patients",
            allowed=f"[1, {MAX_BATCH}]")


def test_batch_errors_name_the_patient_and_range(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    missing = {k: v for k, v in PATIENT.items() if k != "gaf"}
    patients = [
        {"features": PATIENT},
        {"features": {**PATIENT, "phq9": 28}},
        {"features": {**PATIENT, "age": "34"}},
        {"features": missing},
        {"features": {**PATIENT, "num_sessions": 2.5}},
        {"features": {**PATIENT, "bmi": 31}},
        {"id": 7, "features": PATIENT},
    ]
    body = problem(client.post("/v1/risk/batch", json={"patients": patients}), 422,
                   field="patients.1.features.phq9", allowed="[0, 27]")
    named = {e["field"]: e.get("allowed") for e in body["errors"]}
    assert named["patients.2.features.age"] == RANGES["age"]
    assert named["patients.3.features.gaf"] == RANGES["gaf"]
    assert named["patients.4.features.num_sessions"] == RANGES["num_sessions"]
    assert "patients.5.features.bmi" in named
    assert "patients.6.id" in named
    assert not any(f.startswith("patients.0.") for f in named)


def test_batch_non_finite_value(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)  # features are checked against the scoring model
    text = json.dumps({"patients": [{"features": PATIENT}, {"features": PATIENT}]})
    text = text.replace('"gaf": 35', '"gaf": NaN', 2).replace('"gaf": NaN', '"gaf": 35', 1)
    response = client.post("/v1/risk/batch", content=text,
                           headers={"content-type": "application/json"})
    problem(response, 422, field="patients.1.features.gaf", allowed="[1, 100]")


def test_batch_unknown_or_missing_model(client: TestClient, run_worker: Any) -> None:
    body = {"patients": [{"features": PATIENT}]}
    problem(client.post("/v1/risk/batch", json=body), 404, field="model_id",
            kind="model-not-found")
    (model_id,) = train_models(client, run_worker)
    problem(client.post("/v1/risk/batch", json={**body, "model_id": model_id + 1}), 404,
            field="model_id", kind="model-not-found")
    problem(client.post("/v1/risk/batch", json={**body, "model_id": 0}), 422,
            field="model_id", allowed="[1, 2147483647]")  # ids are 32-bit on PostgreSQL


def test_patient_features_never_logged(
    client: TestClient, run_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    train_models(client, run_worker)
    marker = {"age": 67, "phq9": 23, "gaf": 19, "num_sessions": 41, "substance_use": 1,
              "prior_crisis": 1}
    patient_id = "pt-never-logged-5f2c"
    caplog.set_level(logging.DEBUG)
    calls = [
        ("/v1/risk", {"features": marker}),
        ("/v1/risk/batch", {"patients": [{"id": patient_id, "features": marker}]}),
        ("/v1/risk/batch?view=compact", {"patients": [{"id": patient_id, "features": marker}]}),
        ("/v1/risk/fhir", {"features": marker, "subject": f"Patient/{patient_id}"}),
        ("/v1/risk", {"features": {**marker, "phq9": 99}}),  # and the error path
    ]
    for path, body in calls:
        assert client.post(path, json=body).status_code in (200, 422)
    assert caplog.records, "nothing was captured: the check would be vacuous"
    values = re.compile(r"(?<![\w.])(67|23|19|41|99)(?![\w.])")
    for record in caplog.records:
        text = record.getMessage()
        assert patient_id not in text, record
        if record.name.startswith("sqlalchemy"):  # SQL text, not data: check bound parameters
            assert not values.search(str(record.args)), record
        else:
            assert not values.search(text), record
