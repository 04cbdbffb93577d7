"""CDS Hooks: discovery, a patient-view card from prefetched FHIR resources, and the errors an
EHR can act on (412 for keys left out, 404 unknown service, 400/422 malformed calls)."""

import copy
import logging
import re
import uuid
from datetime import date
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cdshooks.service import LEGACY_SERVICE_IDS, SERVICE_ID
from app.fhir.codes import FEATURE_SYSTEM, LOINC, TOPIC_CODE, TOPIC_SYSTEM
from app.fhir.service import percent
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

PATIENT_ID = "pat-42"
URL = f"/cds-services/{SERVICE_ID}"


def birth_date_for(age: int) -> str:
    return date(date.today().year - age, 1, 1).isoformat()  # birthday already passed


def observation(obs_id: str, system: str, code: str, when: str, **value: Any) -> dict[str, Any]:
    return {"resourceType": "Observation", "id": obs_id, "status": "final",
            "code": {"coding": [{"system": system, "code": code}]},
            "subject": {"reference": f"Patient/{PATIENT_ID}"},
            "effectiveDateTime": when, **value}


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "searchset",
            "entry": [{"resource": r} for r in resources]}


def prefetch() -> dict[str, Any]:
    """The PATIENT of tests/conftest.py as an EHR would send it, with older values too."""
    return {
        "patient": {"resourceType": "Patient", "id": PATIENT_ID,
                    "birthDate": birth_date_for(PATIENT["age"])},
        "phq9": bundle(
            observation("phq9-new", LOINC, "44261-6", "2026-03-01T10:00:00Z",
                        valueQuantity={"value": 22, "unit": "{score}"}),
            observation("phq9-old", LOINC, "44261-6", "2025-01-01T10:00:00Z",
                        valueQuantity={"value": 3, "unit": "{score}"}),
        ),
        "gaf": bundle(observation("gaf-1", FEATURE_SYSTEM, "gaf", "2026-02-01", valueInteger=35)),
        "num_sessions": bundle(observation("s-1", FEATURE_SYSTEM, "num_sessions",
                                           "2026-02-01T00:00:00+01:00",
                                           valueQuantity={"value": 12.0})),
        "substance_use": bundle(observation("su-1", FEATURE_SYSTEM, "substance_use",
                                            "2026-01-05", valueBoolean=True)),
        "prior_crisis": observation(
            "pc-1", FEATURE_SYSTEM, "prior_crisis", "2026-01-05",
            valueCodeableConcept={"coding": [{"system": "http://snomed.info/sct",
                                              "code": "373066001"}]},
        ),
    }


EVERY_BAND = {"dev.dpcrisis.min-band": "low"}
"""The request extension asking for a card whatever the band (the default hides low)."""


def hook_call(**changes: Any) -> dict[str, Any]:
    body = {"hook": "patient-view", "hookInstance": str(uuid.uuid4()),
            "fhirServer": "https://ehr.example/fhir",
            "context": {"userId": "Practitioner/7", "patientId": PATIENT_ID},
            "prefetch": prefetch(), "extension": EVERY_BAND}
    body.update(changes)
    return body


def test_discovery_names_the_data_it_needs(client: TestClient) -> None:
    response = client.get("/cds-services")
    assert response.status_code == 200
    (svc,) = response.json()["services"]
    assert svc["id"] == SERVICE_ID and svc["hook"] == "patient-view"
    assert svc["title"] and svc["description"]
    prefetch_templates = svc["prefetch"]
    assert prefetch_templates["patient"] == "Patient/{{context.patientId}}"
    assert "code=http://loinc.org|44261-6" in prefetch_templates["phq9"]
    assert f"code={FEATURE_SYSTEM}|gaf" in prefetch_templates["gaf"]
    assert prefetch_templates["conditions"] == "Condition?patient={{context.patientId}}"
    assert prefetch_templates["encounters"] == "Encounter?patient={{context.patientId}}"
    assert set(prefetch_templates) == {"patient", "phq9", "gaf", "conditions", "encounters"}
    assert all("{{context.patientId}}" in t for t in prefetch_templates.values())
    # No model is active yet: discovery describes the built-in crisis schema and says so.
    # GAF has no declared code; the crisis schema keeps its published local code.
    assert svc["extension"]["dev.dpcrisis.model-id"] is None
    assert "No model is active" in svc["description"]
    assert svc["extension"]["dev.dpcrisis.not-prefetchable"] == []


def test_card_for_patient_view(any_client: TestClient, run_worker: Any) -> None:
    (model_id,) = train_models(any_client, run_worker)
    plain = any_client.post("/v1/risk", json={"features": PATIENT}).json()
    response = any_client.post(URL, json=hook_call())
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    assert len(card["summary"]) < 140
    assert card["indicator"] == {"low": "info", "medium": "info",
                                 "high": "warning"}[plain["band"]]  # never critical
    assert percent(plain["probability"]) in card["summary"]
    assert card["source"]["label"]
    assert plain["model"]["statement"] in card["detail"]
    assert "PHQ-9 22: severe depressive symptoms (20-27)" in card["detail"]  # the newest PHQ-9
    assert "substance use recorded" in card["detail"] and "prior crisis recorded" in card["detail"]
    uuid.UUID(card["uuid"])
    # The built-in outcome keeps its topic (EHRs filter on it) and its words; the model is
    # named in the detail.
    assert card["source"]["topic"]["code"] == TOPIC_CODE
    assert card["source"]["topic"]["system"] == TOPIC_SYSTEM
    assert f"Model {model_id} (" in card["detail"]
    assert "Crisis within 30 days" in card["summary"]
    assert "within 30 days of this assessment" in card["detail"]


@pytest.mark.parametrize(
    ("alter", "missing"),
    [
        (lambda p: p.pop("phq9"), ["phq9"]),
        (lambda p: [p.pop("gaf"), p.pop("patient")], ["age", "gaf"]),
        (lambda p: p["num_sessions"]["entry"][0]["resource"].update(status="entered-in-error"),
         ["num_sessions"]),
        (lambda p: p["substance_use"]["entry"][0]["resource"].update(
            subject={"reference": "Patient/someone-else"}), ["substance_use"]),
        (lambda p: p.clear(), ["age", "phq9", "gaf", "num_sessions", "substance_use",
                               "prior_crisis"]),
    ],
)
def test_keys_left_out_are_412(client: TestClient, run_worker: Any, alter: Any,
                                 missing: list[str]) -> None:
    train_models(client, run_worker)
    data = copy.deepcopy(prefetch())
    alter(data)
    body = problem(client.post(URL, json=hook_call(prefetch=data)), 412,
                   kind="prefetch-incomplete")
    assert body["missing"] == missing
    assert {e["field"] for e in body["errors"]} == {f"prefetch.{m}" for m in missing}
    for name in missing:
        assert name in body["detail"]


def test_age_observation_is_used_without_birth_date(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    data = prefetch()
    data["patient"] = {"resourceType": "Patient", "id": PATIENT_ID}
    data["age"] = bundle(observation("age-1", LOINC, "30525-0", "2026-01-01",
                                     valueQuantity={"value": 34, "unit": "a"}))
    response = client.post(URL, json=hook_call(prefetch=data))
    assert response.status_code == 200, response.text
    assert "Age 34 years" in response.json()["cards"][0]["detail"]


def test_the_id_registered_before_outcomes_were_declared_still_answers(
        client: TestClient, run_worker: Any) -> None:
    """Discovery lists the outcome-neutral id; an EHR registered with the old one keeps its
    cards and its feedback."""
    train_models(client, run_worker)
    listed = [s["id"] for s in client.get("/cds-services").json()["services"]]
    assert listed == [SERVICE_ID] and LEGACY_SERVICE_IDS[0] not in listed
    old = f"/cds-services/{LEGACY_SERVICE_IDS[0]}"
    answered = client.post(old, json=hook_call())
    assert answered.status_code == 200, answered.text
    (card,) = answered.json()["cards"]
    assert card["summary"] == client.post(URL, json=hook_call()).json()["cards"][0]["summary"]
    feedback = {"card": card["uuid"], "outcome": "accepted",
                "outcomeTimestamp": "2026-01-01T00:00:00Z", "acceptedSuggestions": []}
    assert client.post(f"{old}/feedback", json={"feedback": [feedback]}).status_code == 200
    assert client.post("/cds-services/another-id", json=hook_call()).status_code == 404


def test_malformed_hook_calls(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    problem(client.post("/cds-services/nope", json=hook_call()), 404,
            kind="cds-service-not-found")
    problem(client.post("/cds-services/nope", json={"garbage": True}), 404)
    problem(client.post(URL, json=hook_call(hook="order-select")), 400, field="hook")
    problem(client.post(URL, json={"hook": "patient-view"}), 422, field="hookInstance")
    problem(client.post(URL, json=hook_call(context={"userId": "Practitioner/7"})), 422,
            field="context.patientId")
    problem(client.post(URL, content="{not json", headers={"content-type": "application/json"}),
            422)

    out_of_range = prefetch()
    out_of_range["phq9"]["entry"][0]["resource"]["valueQuantity"]["value"] = 30
    problem(client.post(URL, json=hook_call(prefetch=out_of_range)), 422,
            field="prefetch.phq9", allowed="[0, 27]")
    wrong_kind = prefetch()
    wrong_kind["gaf"]["entry"][0]["resource"] = observation(
        "gaf-2", FEATURE_SYSTEM, "gaf", "2026-02-02", valueString="poor")
    problem(client.post(URL, json=hook_call(prefetch=wrong_kind)), 422,
            field="prefetch.gaf", allowed="[1, 100]")


def test_prefetched_values_are_not_logged(
    client: TestClient, run_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    train_models(client, run_worker)
    data = prefetch()
    data["gaf"]["entry"][0]["resource"]["valueInteger"] = 17
    caplog.set_level(logging.DEBUG)
    assert client.post(URL, json=hook_call(prefetch=data)).status_code == 200
    data["phq9"]["entry"][0]["resource"]["valueQuantity"]["value"] = 31  # the error path
    assert client.post(URL, json=hook_call(prefetch=data)).status_code == 422
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + str(record.args)
        assert PATIENT_ID not in text and "phq9-new" not in text, record
        if not record.name.startswith("sqlalchemy"):
            assert not re.search(r"(?<![\w.])(17|31)(?![\w.])", text), record
