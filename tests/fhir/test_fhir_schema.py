"""POST /v1/risk/fhir follows the scoring model's declared schema: ``basis`` keys are its
features, each coded by its declared code (else the local code system), values as scored (a
category as text, never its index)."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.fhir.codes import (
    FEATURE_CODE_EXTENSION,
    FEATURE_SYSTEM,
    FEATURE_VALUE_EXTENSION,
    LOINC,
    SCHEMA_FEATURES,
)
from tests.conftest import PATIENT as CRISIS_PATIENT
from tests.fhir.clinic_model import CLINIC, PATIENT, train_clinic_model
from tests.fhir.r4 import outcome, valid

NAMES = ["age", "phq9", "living", "sleep_hours", "prior_crisis"]


@pytest.fixture
def clinic(client: TestClient, run_worker: Any, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return train_clinic_model(client, run_worker)


def extensions(item: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the coding, the value element) of one basis item."""
    by_url = {e["url"]: e for e in item["extension"]}
    value = {k: v for k, v in by_url[FEATURE_VALUE_EXTENSION].items() if k != "url"}
    return by_url[FEATURE_CODE_EXTENSION]["valueCoding"], value


def test_basis_follows_the_models_schema(client: TestClient, clinic: int) -> None:
    response = client.post("/v1/risk/fhir", json={
        "features": PATIENT, "subject": "Patient/7",
        "basis": {"living": "Observation/liv-1", "phq9": "Observation/phq-1"}})
    assert response.status_code == 200, response.text
    ra = response.json()
    assert ra["method"]["coding"][0]["code"] == f"model-{clinic}"
    basis = ra["basis"]
    assert len(basis) == len(NAMES)  # one per feature of the model's schema, in its order
    coding, value = zip(*(extensions(b) for b in basis), strict=True)

    # A categorical feature: its declared code (no display declared: its label), its category.
    assert coding[2] == {"system": CLINIC, "code": "living-situation",
                         "display": "Living situation"}
    assert value[2] == {"valueString": "alone"}
    assert basis[2]["display"] == f"Living situation: alone ({CLINIC}|living-situation)"
    assert basis[2]["reference"] == "Observation/liv-1"
    # Coded features keep their declared code and display.
    assert coding[1] == {"system": LOINC, "code": "44261-6", "display": "PHQ-9 total"}
    assert value[1] == {"valueInteger": 19} and basis[1]["reference"] == "Observation/phq-1"
    assert coding[0]["code"] == "30525-0" and value[0] == {"valueInteger": 52}
    assert "reference" not in basis[0]
    # No declared code: the schema's own local code system, the feature's name as the code
    # (the built-in crisis schema's published system is its own, never another schema's).
    local = SCHEMA_FEATURES + client.get(f"/v1/models/{clinic}").json()["schema_hash"][:16]
    assert coding[3] == {"system": local, "code": "sleep_hours", "display": "Sleep"}
    assert local != FEATURE_SYSTEM
    assert value[3] == {"valueDecimal": 4.5}
    assert f"({local}|sleep_hours)" in basis[3]["display"]
    assert coding[4]["code"] == "prior-crisis" and value[4] == {"valueBoolean": True}
    assert basis[4]["display"].startswith("prior crisis recorded")


def test_basis_keys_are_the_models_features(client: TestClient, clinic: int) -> None:
    allowed = "features: " + ", ".join(NAMES)
    body = outcome(client.post("/v1/risk/fhir", json={
        "features": PATIENT, "basis": {"gaf": "Observation/1", "living": "Observation/2"}}),
        422, field="basis.gaf", allowed=allowed)
    assert {i["expression"][0] for i in body["issue"]} == {"basis.gaf"}
    # The crisis features are not this model's: every bad key and feature in one answer.
    body = outcome(client.post("/v1/risk/fhir", json={
        "features": CRISIS_PATIENT, "basis": {"num_sessions": "Observation/1"}}), 422)
    fields = {i["expression"][0] for i in body["issue"]}
    assert {"basis.num_sessions", "features.living", "features.gaf"} <= fields
    outcome(client.post("/v1/risk/fhir", json={
        "features": {**PATIENT, "living": 0}, "basis": {"living": "Observation/1"}}),
        422, field="features.living", allowed="one of ['alone', 'family', 'supported housing']")
    outcome(client.post("/v1/risk/fhir", json={
        "features": PATIENT, "basis": {"living": "Patient/1"}}), 422, field="basis.living")


def test_crisis_features_are_refused_in_basis_of_another_model(
    client: TestClient, clinic: int
) -> None:
    """``phq9`` is in both schemas; ``gaf`` only in the crisis one: a basis key is checked
    against the model that scores, named or active."""
    ok = client.post("/v1/risk/fhir", json={"features": PATIENT, "model_id": clinic,
                                            "basis": {"phq9": "Observation/p"}})
    assert ok.status_code == 200, ok.text
    outcome(client.post("/v1/risk/fhir", json={"features": PATIENT, "model_id": clinic,
                                               "basis": {"gaf": "Observation/g"}}),
            422, field="basis.gaf")


def test_a_risk_assessment_is_valid_r4(client: TestClient, clinic: int) -> None:
    """Parsed by fhir.resources' R4 models, as a FHIR client would."""
    ra = client.post("/v1/risk/fhir", json={"features": PATIENT, "subject": "Patient/7",
                                            "basis": {"living": "Observation/l"}}).json()
    parsed = valid(ra)
    assert parsed.basis[2].extension[1].valueString == "alone"
    assert parsed.contained[0].get_resource_type() == "Device"
