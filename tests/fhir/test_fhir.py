"""POST /v1/risk/fhir: a FHIR R4 RiskAssessment built from the same score as /v1/risk, parsed
by fhir.resources; errors as OperationOutcome; the service's CodeSystems."""

from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.fhir.codes import BAND_SYSTEM, FEATURE_SYSTEM, RISK_PROBABILITY
from app.fhir.service import likelihood, rounded
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT
from tests.fhir.r4 import FHIR_JSON, outcome, valid

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow


def codings(ra: dict[str, Any]) -> dict[str, str]:
    return {c["system"]: c["code"] for c in ra["prediction"][0]["qualitativeRisk"]["coding"]}


def test_risk_assessment_resource(any_client: TestClient, run_worker: Any) -> None:
    (model_id,) = train_models(any_client, run_worker)
    plain = any_client.post("/v1/risk", json={"features": PATIENT}).json()
    model = any_client.get(f"/v1/models/{model_id}").json()
    body = {"features": PATIENT, "subject": "Patient/123",
            "basis": {"phq9": "Observation/phq9-1"}}
    response = any_client.post("/v1/risk/fhir", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(FHIR_JSON)
    ra = response.json()
    parsed = valid(ra)  # an R4 RiskAssessment, as a FHIR client reads it

    assert ra["resourceType"] == "RiskAssessment" and ra["status"] == "final"
    assert ra["subject"] == {"reference": "Patient/123"}
    occurred = datetime.fromisoformat(ra["occurrenceDateTime"].replace("Z", "+00:00"))
    assert occurred.tzinfo is not None
    method = ra["method"]
    assert method["coding"][0]["code"] == f"model-{model_id}"
    assert plain["model"]["version"] in method["text"]

    # The model as a contained Device: id, version and artifact hash; it is the performer.
    (device,) = ra["contained"]
    assert ra["performer"]["reference"] == f"#{device['id']}"
    assert parsed.contained[0].get_resource_type() == "Device"
    assert {i["value"] for i in device["identifier"]} == {str(model_id),
                                                          model["artifact_sha256"]}
    assert {v["value"] for v in device["version"]} == {plain["model"]["version"],
                                                       model["artifact_sha256"]}

    # An identifier a retry gets again; another subject gets another.
    (identifier,) = ra["identifier"]
    assert identifier["system"] == "urn:ietf:rfc:3986"
    assert identifier["value"].startswith("urn:uuid:")
    again = any_client.post("/v1/risk/fhir", json=body).json()
    assert again["identifier"] == ra["identifier"]
    other = any_client.post("/v1/risk/fhir", json={**body, "subject": "Patient/124"}).json()
    assert other["identifier"] != ra["identifier"]

    # The built-in schema's outcome keeps its own words, its coding and its 30-day window.
    assert BUILT_IN_SCHEMA.outcome.code is not None
    crisis = {"coding": [BUILT_IN_SCHEMA.outcome.code.model_dump()],
              "text": "Crisis within 30 days"}
    assert ra["code"] == crisis
    (prediction,) = ra["prediction"]
    assert prediction["outcome"] == crisis
    p = prediction["probabilityDecimal"]
    assert p == float(f"{plain['probability']:.3g}") and p == pytest.approx(
        plain["probability"], rel=5e-3)
    assert len(f"{p:.15g}".lstrip("0.").replace(".", "")) <= 3  # 3 significant digits
    when = prediction["whenPeriod"]
    start = datetime.fromisoformat(when["start"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(when["end"].replace("Z", "+00:00"))
    assert end - start == timedelta(days=30)
    coded = codings(ra)
    assert list(coded) == [RISK_PROBABILITY, BAND_SYSTEM]  # HL7 first, the band second
    assert coded[RISK_PROBABILITY] == likelihood(plain["probability"])[0]
    assert coded[BAND_SYSTEM] == plain["band"]
    assert "Exact Shapley" in prediction["rationale"]

    assert len(ra["basis"]) == 6
    phq9 = next(b for b in ra["basis"] if "44261-6" in b["display"])
    assert phq9["reference"] == "Observation/phq9-1"
    assert "PHQ-9 22: severe depressive symptoms" in phq9["display"]
    found = {e["valueCoding"]["code"]: e["valueCoding"]["system"]
             for b in ra["basis"] for e in b["extension"] if e["url"].endswith("feature-code")}
    assert found["44261-6"] == found["30525-0"] == "http://loinc.org"
    assert found["gaf"] == FEATURE_SYSTEM
    notes = " ".join(n["text"] for n in ra["note"])
    assert plain["model"]["statement"] in notes and "0-1 scale" in notes


@pytest.mark.parametrize(("p", "code"), [
    (0.0004, "low"), (0.0999, "low"), (0.1, "moderate"), (0.4999, "moderate"),
    (0.5, "high"), (0.97, "high"),
])
def test_the_hl7_code_is_read_from_the_probability(p: float, code: str) -> None:
    """``high`` means "more likely than not"; never negligible nor certain."""
    assert likelihood(p)[0] == code


def test_rounding_keeps_three_significant_digits() -> None:
    assert [rounded(p) for p in (0.123456, 0.0123456, 0.000123456, 0.99951)] == [
        0.123, 0.0123, 0.000123, 1.0]


@pytest.mark.parametrize("band", ["low", "medium", "high"])
def test_the_band_coding_follows_the_models_cut_offs(
    client: TestClient, run_worker: Any, band: str
) -> None:
    (model_id,) = train_models(client, run_worker)
    p = client.post("/v1/risk", json={"features": PATIENT}).json()["probability"]
    thresholds = {"low": {"low_medium": (1 + p) / 2, "medium_high": (3 + p) / 4},
                  "medium": {"low_medium": p / 2, "medium_high": (1 + p) / 2},
                  "high": {"low_medium": p / 3, "medium_high": p / 2}}[band]
    assert client.put(f"/v1/models/{model_id}/band-thresholds",
                      json=thresholds).status_code == 200
    ra = client.post("/v1/risk/fhir", json={"features": PATIENT}).json()
    valid(ra)
    assert codings(ra) == {RISK_PROBABILITY: likelihood(p)[0], BAND_SYSTEM: band}
    assert ra["subject"] == {"display": "patient not identified"}


def test_fhir_errors_are_operation_outcomes(client: TestClient, run_worker: Any,
                                           client_as: Any) -> None:
    outcome(client.post("/v1/risk/fhir", json={"features": PATIENT}), 404,
            kind="model-not-found")
    train_models(client, run_worker)
    body = outcome(client.post("/v1/risk/fhir", json={"features": {**PATIENT, "phq9": 28}}),
                   422, field="features.phq9", allowed="[0, 27]")
    assert body["issue"][0]["code"] == "invalid"
    for subject in ("123", "Practitioner/1", "Patient/", "Patient/a b"):
        outcome(client.post("/v1/risk/fhir", json={"features": PATIENT, "subject": subject}),
                422, field="subject")
    outcome(client.post("/v1/risk/fhir",
                        json={"features": PATIENT, "basis": {"bmi": "Observation/1"}}),
            422, field="basis.bmi")
    outcome(client.post("/v1/risk/fhir",
                        json={"features": PATIENT, "basis": {"phq9": "Patient/1"}}),
            422, field="basis.phq9")
    outcome(client.post("/v1/risk/fhir", content="{not json",
                        headers={"content-type": "application/fhir+json"}), 422)
    unauthenticated = client_as(None).post("/v1/risk/fhir", json={"features": PATIENT})
    assert outcome(unauthenticated, 401)["issue"][0]["code"] == "login"
    assert unauthenticated.headers["www-authenticate"] == "Bearer"
    assert outcome(client_as("data_scientist").post("/v1/risk/fhir", json={
        "features": PATIENT}), 403)["issue"][0]["code"] == "forbidden"
    # A client that prefers problem+json gets the problem document.
    problem(client.post("/v1/risk/fhir", json={"features": {**PATIENT, "phq9": 28}},
                        headers={"accept": "application/problem+json"}),
            422, field="features.phq9", allowed="[0, 27]")


def test_the_band_code_system_is_served_at_its_url(client_as: Any, client: TestClient) -> None:
    public = client_as(None)  # terminology needs no key
    response = public.get("/fhir/CodeSystem/risk-band")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(FHIR_JSON)
    system = response.json()
    valid(system)
    assert system["url"] == BAND_SYSTEM and BAND_SYSTEM.endswith("/fhir/CodeSystem/risk-band")
    assert [c["code"] for c in system["concept"]] == ["low", "medium", "high"]
    assert system["content"] == "complete" and system["status"] == "active"
    found = public.get("/fhir/CodeSystem", params={"url": BAND_SYSTEM}).json()
    assert found["total"] == 1 and found["entry"][0]["resource"] == system
    assert public.get("/fhir/CodeSystem", params={"url": "x"}).json()["total"] == 0
    valid(public.get("/fhir/CodeSystem/cds-topic").json())
    outcome(public.get("/fhir/CodeSystem/nope"), 404, kind="code-system-not-found")
