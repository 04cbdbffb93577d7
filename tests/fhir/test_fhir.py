"""POST /v1/risk/fhir: a FHIR R4 RiskAssessment built from the same score as /v1/risk."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.fhir.codes import FEATURE_SYSTEM, RISK_PROBABILITY
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT

FHIR_JSON = "application/fhir+json"


def test_risk_assessment_resource(any_client: TestClient, run_worker: Any) -> None:
    (model_id,) = train_models(any_client, run_worker)
    plain = any_client.post("/v1/risk", json={"features": PATIENT}).json()
    response = any_client.post(
        "/v1/risk/fhir",
        json={"features": PATIENT, "subject": "Patient/123",
              "basis": {"phq9": "Observation/phq9-1"}},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(FHIR_JSON)
    ra = response.json()

    assert ra["resourceType"] == "RiskAssessment" and ra["status"] == "final"
    assert ra["subject"] == {"reference": "Patient/123"}
    occurred = datetime.fromisoformat(ra["occurrenceDateTime"].replace("Z", "+00:00"))
    assert occurred.tzinfo is not None
    method = ra["method"]
    assert method["coding"][0]["code"] == f"model-{model_id}"
    assert plain["model"]["version"] in method["text"]

    (prediction,) = ra["prediction"]
    assert prediction["outcome"]["text"] == "mental-health crisis within 30 days"
    assert prediction["probabilityDecimal"] == pytest.approx(plain["probability"], abs=1e-12)
    assert 0 < prediction["probabilityDecimal"] < 1
    when = prediction["whenPeriod"]
    start = datetime.fromisoformat(when["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(when["end"].replace("Z", "+00:00"))
    assert end - start == timedelta(days=30)
    hl7 = [c for c in prediction["qualitativeRisk"]["coding"] if c["system"] == RISK_PROBABILITY]
    expected = {"low": "low", "medium": "moderate", "high": "high"}[plain["band"]]
    assert [c["code"] for c in hl7] == [expected]
    assert "Exact Shapley" in prediction["rationale"]

    assert len(ra["basis"]) == 6
    phq9 = next(b for b in ra["basis"] if "44261-6" in b["display"])
    assert phq9["reference"] == "Observation/phq9-1"
    assert "PHQ-9 22: severe depressive symptoms" in phq9["display"]
    # Each feature's coding: the crisis schema declares LOINC for age and PHQ-9; GAF has no
    # declared code, so it keeps the local code system.
    codings = {e["valueCoding"]["code"]: e["valueCoding"]["system"]
               for b in ra["basis"] for e in b["extension"] if e["url"].endswith("feature-code")}
    assert codings["44261-6"] == codings["30525-0"] == "http://loinc.org"
    assert codings["gaf"] == FEATURE_SYSTEM
    notes = " ".join(n["text"] for n in ra["note"])
    assert plain["model"]["statement"] in notes and "0-1 scale" in notes


@pytest.mark.parametrize(("band", "code"), [("low", "low"), ("medium", "moderate"),
                                            ("high", "high")])
def test_every_band_maps_to_a_risk_probability_code(
    client: TestClient, run_worker: Any, band: str, code: str
) -> None:
    (model_id,) = train_models(client, run_worker)
    p = client.post("/v1/risk", json={"features": PATIENT}).json()["probability"]
    thresholds = {"low": {"low_medium": (1 + p) / 2, "medium_high": (3 + p) / 4},
                  "medium": {"low_medium": p / 2, "medium_high": (1 + p) / 2},
                  "high": {"low_medium": p / 3, "medium_high": p / 2}}[band]
    assert client.put(f"/v1/models/{model_id}/band-thresholds",
                      json=thresholds).status_code == 200
    ra = client.post("/v1/risk/fhir", json={"features": PATIENT}).json()
    coding = ra["prediction"][0]["qualitativeRisk"]["coding"]
    assert {c["system"]: c["code"] for c in coding}[RISK_PROBABILITY] == code
    assert ra["subject"] == {"display": "patient not identified"}


def test_fhir_bad_input(client: TestClient, run_worker: Any) -> None:
    problem(client.post("/v1/risk/fhir", json={"features": PATIENT}), 404,
            kind="model-not-found")
    train_models(client, run_worker)
    problem(client.post("/v1/risk/fhir", json={"features": {**PATIENT, "phq9": 28}}), 422,
            field="features.phq9", allowed="[0, 27]")
    for subject in ("123", "Practitioner/1", "Patient/", "Patient/a b"):
        problem(client.post("/v1/risk/fhir", json={"features": PATIENT, "subject": subject}),
                422, field="subject")
    problem(client.post("/v1/risk/fhir",
                        json={"features": PATIENT, "basis": {"bmi": "Observation/1"}}),
            422, field="basis.bmi")
    problem(client.post("/v1/risk/fhir",
                        json={"features": PATIENT, "basis": {"phq9": "Patient/1"}}),
            422, field="basis.phq9")
