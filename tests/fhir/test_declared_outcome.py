"""A RiskAssessment names the scoring model's declared outcome: its coding and label, a
``whenPeriod`` only with a declared horizon, features coded in the schema's own local code
system, which the service serves. A model of another outcome says nothing of a crisis; the
built-in crisis schema keeps its words (tests/fhir/test_fhir.py)."""

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.fhir.codes import FEATURE_CODE_EXTENSION, FEATURE_SYSTEM, SCHEMA_FEATURES
from tests.fhir.r4 import outcome, valid
from tests.fhir.utilisation_model import (
    CLINIC,
    HORIZON_DAYS,
    LABEL,
    OUTCOME_CODE,
    PATIENT,
    train_utilisation_model,
)

PRODUCT = re.compile("dpcrisis", re.IGNORECASE)
CRISIS = re.compile("crisis", re.IGNORECASE)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def crisis_words(resource: dict[str, Any]) -> list[str]:
    """Each "crisis" in the JSON, with some context, once the product's name is taken out."""
    text = PRODUCT.sub("", json.dumps(resource))
    return [text[max(m.start() - 60, 0): m.end() + 60] for m in CRISIS.finditer(text)]


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def assess(client: TestClient) -> dict[str, Any]:
    response = client.post("/v1/risk/fhir", json={
        "features": PATIENT, "subject": "Patient/u-1", "basis": {"visits": "Observation/v-1"}})
    assert response.status_code == 200, response.text
    ra = response.json()
    valid(ra)  # an R4 RiskAssessment, as a FHIR client reads it
    return ra


def feature_codings(ra: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {e["valueCoding"]["code"]: e["valueCoding"] for b in ra["basis"]
            for e in b["extension"] if e["url"] == FEATURE_CODE_EXTENSION}


def test_an_outcome_without_code_or_horizon(client: TestClient, run_worker: Any,
                                            client_as: Any) -> None:
    model_id = train_utilisation_model(client, run_worker)
    ra = assess(client)
    assert ra["code"] == {"text": LABEL}
    (prediction,) = ra["prediction"]
    assert prediction["outcome"] == {"text": LABEL}
    assert "whenPeriod" not in prediction  # no declared horizon: no made-up window
    assert ra["contained"][0]["type"]["text"] == (
        "risk model trained with differential privacy (DP-SGD)")
    assert not crisis_words(ra), crisis_words(ra)

    # The uncoded feature is coded in the schema's own code system, which the service serves.
    schema_hash = client.get(f"/v1/models/{model_id}").json()["schema_hash"]
    system = SCHEMA_FEATURES + schema_hash[:16]
    assert feature_codings(ra)["visits"] == {"system": system, "code": "visits",
                                             "display": "Visits in the last year"}
    assert feature_codings(ra)["housing"]["system"] == CLINIC  # declared: its own code
    public = client_as(None)  # terminology needs no key
    served = public.get(system.removeprefix("https://dpcrisis.dev"))
    assert served.status_code == 200, served.text
    code_system = served.json()
    valid(code_system)
    assert code_system["url"] == system
    assert [(c["code"], c["display"]) for c in code_system["concept"]] == [
        ("visits", "Visits in the last year")]  # only the uncoded feature
    assert "from 0 to 60" in code_system["concept"][0]["definition"]
    assert not crisis_words(code_system), crisis_words(code_system)
    found = public.get("/fhir/CodeSystem", params={"url": system}).json()
    assert found["total"] == 1 and found["entry"][0]["resource"] == code_system
    listed = public.get("/fhir/CodeSystem").json()
    assert {e["resource"]["id"] for e in listed["entry"]} == {"risk-band", "cds-topic"}
    outcome(public.get("/fhir/CodeSystem/schema-features-0123456789abcdef"), 404,
            kind="code-system-not-found")


def test_an_outcome_with_its_code_and_horizon(client: TestClient, run_worker: Any) -> None:
    train_utilisation_model(client, run_worker, horizon=True, coded=True)
    ra = assess(client)
    concept = {"coding": [OUTCOME_CODE], "text": LABEL}
    assert ra["code"] == concept
    (prediction,) = ra["prediction"]
    assert prediction["outcome"] == concept
    period = prediction["whenPeriod"]
    assert period["start"] == ra["occurrenceDateTime"]
    assert when(period["end"]) - when(period["start"]) == timedelta(days=HORIZON_DAYS)
    assert not crisis_words(ra), crisis_words(ra)


def test_the_built_in_schemas_code_systems(client_as: Any, client: TestClient) -> None:
    """Its uncoded features keep the system EHRs mapped; its outcome's system is served too;
    neither is listed, as no schema's own system is."""
    public = client_as(None)
    features = public.get("/fhir/CodeSystem/crisis-features").json()
    valid(features)
    assert features["url"] == FEATURE_SYSTEM
    uncoded = [f.name for f in BUILT_IN_SCHEMA.features if f.code is None]
    assert [c["code"] for c in features["concept"]] == uncoded
    assert BUILT_IN_SCHEMA.outcome.code is not None
    system = BUILT_IN_SCHEMA.outcome.code.system
    found = public.get("/fhir/CodeSystem", params={"url": system}).json()
    assert found["total"] == 1
    (concept,) = found["entry"][0]["resource"]["concept"]
    assert concept["code"] == BUILT_IN_SCHEMA.outcome.code.code
    # The band and topic systems describe any outcome; only the built-in topic names its own.
    bands = public.get("/fhir/CodeSystem/risk-band").json()
    assert not crisis_words(bands), crisis_words(bands)
    topics = public.get("/fhir/CodeSystem/cds-topic").json()
    neutral = [c for c in topics["concept"] if c["code"] == "outcome-risk"]
    assert neutral and not crisis_words({"concept": neutral})
