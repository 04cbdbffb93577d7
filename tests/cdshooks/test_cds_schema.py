"""CDS Hooks follows the active model's declared schema: discovery asks for its coded features,
a feature without a code gets an "insufficient data" card, a fully coded schema is scored from
the prefetch (a categorical value read as its category)."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.fhir.codes import LOINC, OUTCOME_TOPIC_CODE, TOPIC_SYSTEM
from tests.cdshooks.test_cds_hooks import PATIENT_ID, URL, birth_date_for, bundle, hook_call
from tests.cdshooks.test_cds_hooks import observation as obs
from tests.fhir.clinic_model import CLINIC, SLEEP_CODE, train_clinic_model

OBSERVATION = "Observation?patient={{context.patientId}}&code="


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def clinic_prefetch() -> dict[str, Any]:
    """What the clinic model's discovery asks for (and the sleep Observation, if coded)."""
    return {
        "patient": {"resourceType": "Patient", "id": PATIENT_ID,
                    "birthDate": birth_date_for(52)},
        "phq9": bundle(obs("p-1", LOINC, "44261-6", "2026-03-01", valueInteger=19)),
        "living": bundle(obs("l-1", CLINIC, "living-situation", "2026-03-01",
                             valueCodeableConcept={"text": "Alone"})),
        "prior_crisis": bundle(obs("c-1", CLINIC, "prior-crisis", "2026-03-01",
                                   valueBoolean=True)),
        "sleep_hours": bundle(obs("s-1", SLEEP_CODE["system"], SLEEP_CODE["code"],
                                  "2026-03-01", valueQuantity={"value": 4.5})),
    }


def scored_events(client: TestClient) -> list[Any]:
    return client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"]


def test_discovery_follows_the_active_model(client: TestClient, run_worker: Any,
                                            data_dir: None) -> None:
    model_id = train_clinic_model(client, run_worker)
    (svc,) = client.get("/cds-services").json()["services"]
    templates = svc["prefetch"]
    assert templates == {
        "patient": "Patient/{{context.patientId}}",  # age: LOINC 30525-0, from birthDate
        "phq9": f"{OBSERVATION}http://loinc.org|44261-6&_sort=-date&_count=1",
        "living": f"{OBSERVATION}{CLINIC}|living-situation&_sort=-date&_count=1",
        "prior_crisis": f"{OBSERVATION}{CLINIC}|prior-crisis&_sort=-date&_count=1",
    }
    extension = svc["extension"]
    assert extension["dev.dpcrisis.model-id"] == model_id
    assert extension["dev.dpcrisis.not-prefetchable"] == ["sleep_hours"]
    codes = {c["feature"]: c for c in extension["dev.dpcrisis.feature-codes"]}
    assert list(codes) == ["age", "phq9", "living", "prior_crisis"]
    assert codes["age"]["prefetch"] == "patient" and codes["age"]["code"] == "30525-0"
    assert codes["age"]["path"] == "birthDate"
    assert codes["living"] == {
        "feature": "living", "label": "Living situation", "prefetch": "living",
        "resource": "Observation", "path": None, "codes": [], "system": CLINIC,
        "code": "living-situation",
        "display": "Living situation",
        "allowed": "one of ['alone', 'family', 'supported housing']"}
    assert "sleep_hours" in svc["description"] and "insufficient data" in svc["description"]
    assert "gaf" not in str(svc)


def test_an_uncoded_feature_gets_an_insufficient_data_card(
    client: TestClient, run_worker: Any, data_dir: None
) -> None:
    model_id = train_clinic_model(client, run_worker)
    response = client.post(URL, json=hook_call(prefetch=clinic_prefetch()))
    assert response.status_code == 200, response.text  # not 412: no prefetch could carry it
    (card,) = response.json()["cards"]
    assert "insufficient data" in card["summary"] and len(card["summary"]) < 140
    assert card["indicator"] == "info"
    assert "Sleep (`sleep_hours`, [0, 24])" in card["detail"]
    assert "POST /v1/risk" in card["detail"]
    assert "Not in this call's prefetch" not in card["detail"]
    assert "alone" not in card["detail"].lower() and "4.5" not in card["detail"]  # no values
    # An outcome declared without a code: the neutral topic, whichever model scored.
    assert (card["source"]["topic"]["system"], card["source"]["topic"]["code"]) == (
        TOPIC_SYSTEM, OUTCOME_TOPIC_CODE)
    assert f"Model {model_id} (" in card["detail"]
    assert scored_events(client) == []  # nobody was scored

    lacking = clinic_prefetch()
    lacking.pop("living")
    (card,) = client.post(URL, json=hook_call(prefetch=lacking)).json()["cards"]
    assert "Not in this call's prefetch" in card["detail"]
    assert "Living situation (`living`" in card["detail"]


def test_a_fully_coded_schema_is_scored_from_the_prefetch(
    client: TestClient, run_worker: Any, data_dir: None
) -> None:
    model_id = train_clinic_model(client, run_worker, sleep_coded=True)
    (svc,) = client.get("/cds-services").json()["services"]
    assert svc["extension"]["dev.dpcrisis.not-prefetchable"] == []
    assert f"{CLINIC}|sleep-hours" in svc["prefetch"]["sleep_hours"]

    response = client.post(URL, json=hook_call(prefetch=clinic_prefetch()))
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    plain = client.post("/v1/risk", json={"features": {
        "age": 52, "phq9": 19, "living": "alone", "sleep_hours": 4.5, "prior_crisis": 1}})
    assert plain.json()["model"]["id"] == model_id
    assert card["summary"].startswith(plain.json()["band"].capitalize())
    assert "Living situation: alone" in card["detail"]
    assert "prior crisis recorded" in card["detail"]
    assert sorted(e["detail"]["endpoint"] for e in scored_events(client)) == ["cds-services",
                                                                             "risk"]

    unknown = clinic_prefetch()
    unknown["living"]["entry"][0]["resource"]["valueCodeableConcept"] = {"text": "homeless"}
    body = client.post(URL, json=hook_call(prefetch=unknown))
    assert body.status_code == 422, body.text
    assert body.json()["errors"][0] == {
        "field": "prefetch.living", "message": body.json()["errors"][0]["message"],
        "allowed": "one of ['alone', 'family', 'supported housing']"}
    missing = clinic_prefetch()
    missing.pop("sleep_hours")
    answer = client.post(URL, json=hook_call(prefetch=missing))
    assert answer.status_code == 412, answer.text  # coded but not sent: as before
    assert answer.json()["missing"] == ["sleep_hours"]
