"""Where EHRs keep the crisis inputs: prior crisis and substance use as Conditions (ICD-10-CM,
ICD-10, SNOMED CT; an Encounter's reason too), sessions as a count of Encounters. No data (a
key sent as null, an empty searchset) is an "insufficient data" card, not a 412; a patient
below the minimum band gets no card unless the call asks."""

from datetime import date, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cdshooks.prefetch import features_from_prefetch, sources_of
from app.core.settings import CdsClient, settings
from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.fhir.codes import ICD10CM, LOINC, SNOMED
from app.fhir.service import percent
from tests.api.scoring_helpers import train_models
from tests.cdshooks.ehr import Ehr, bearer
from tests.cdshooks.test_cds_hooks import (
    PATIENT_ID,
    URL,
    birth_date_for,
    bundle,
    hook_call,
    observation,
)
from tests.conftest import PATIENT

TODAY = date.today()
SUBJECT = {"reference": f"Patient/{PATIENT_ID}"}


def condition(cid: str, system: str, code: str, **more: Any) -> dict[str, Any]:
    return {"resourceType": "Condition", "id": cid, "subject": SUBJECT,
            "code": {"coding": [{"system": system, "code": code}]}, **more}


def encounter(eid: str, days_ago: int, status: str = "finished", **more: Any) -> dict[str, Any]:
    start = (TODAY - timedelta(days=days_ago)).isoformat()
    return {"resourceType": "Encounter", "id": eid, "status": status, "subject": SUBJECT,
            "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode",
                      "code": "AMB"}, "period": {"start": f"{start}T09:00:00Z"}, **more}


def ehr_prefetch() -> dict[str, Any]:
    """A realistic prefetch for the crisis model: what its discovery asks for."""
    return {
        "patient": {"resourceType": "Patient", "id": PATIENT_ID,
                    "birthDate": birth_date_for(PATIENT["age"])},
        "phq9": bundle(observation("p-1", LOINC, "44261-6", "2026-03-01T10:00:00Z",
                                   valueQuantity={"value": 22, "unit": "{score}"})),
        "gaf": bundle(observation("g-1", "https://dpcrisis.dev/fhir/CodeSystem/crisis-features",
                                  "gaf", "2026-02-01", valueInteger=35)),
        "conditions": bundle(
            condition("c-1", ICD10CM, "F10.20"),  # alcohol dependence, uncomplicated
            condition("c-2", SNOMED, "82313006"),  # suicide attempt
            condition("c-3", ICD10CM, "E11.9"),  # type 2 diabetes: not an input
        ),
        "encounters": bundle(*(encounter(f"e-{i}", 20 * i + 1) for i in range(12)),
                             encounter("e-old", 400), encounter("e-plan", 3, "planned")),
    }


def read(data: dict[str, Any]) -> Any:
    return features_from_prefetch(data, sources=sources_of(BUILT_IN_ENCODER),
                                  patient_id=PATIENT_ID, today=TODAY)


def test_conditions_and_encounters_give_the_crisis_inputs() -> None:
    got = read(ehr_prefetch())
    assert got.values == {"age": 34.0, "phq9": 22.0, "gaf": 35.0, "num_sessions": 12.0,
                          "substance_use": 1.0, "prior_crisis": 1.0}
    assert got.references["substance_use"] == "Condition/c-1"
    assert got.references["prior_crisis"] == "Condition/c-2"
    assert got.missing == got.absent == ()


@pytest.mark.parametrize(("conditions", "substance", "crisis"), [
    ([], 0.0, 0.0),
    ([condition("a", ICD10CM, "F17.210")], 0.0, 0.0),  # nicotine: left out on purpose
    ([condition("a", "http://hl7.org/fhir/sid/icd-10", "F12.1")], 1.0, 0.0),
    ([condition("a", SNOMED, "66214007")], 1.0, 0.0),
    ([condition("a", ICD10CM, "T14.91XA"), condition("b", ICD10CM, "R45.851")], 0.0, 1.0),
    ([condition("a", ICD10CM, "X78.9XXA")], 0.0, 1.0),  # intentional self-harm, sharp object
    ([condition("a", ICD10CM, "Z91.51")], 0.0, 1.0),  # personal history of suicidal behaviour
    ([condition("a", SNOMED, "82313006", verificationStatus={"coding": [
        {"code": "refuted"}]})], 0.0, 0.0),
    ([condition("a", SNOMED, "82313006", subject={"reference": "Patient/other"})], 0.0, 0.0),
    ([condition("a", SNOMED, "823130")], 0.0, 0.0),  # SNOMED CT matches exactly
    ([encounter("e", 5, reasonCode=[{"coding": [{"system": SNOMED,
                                                 "code": "248062006"}]}])], 0.0, 1.0),
])
def test_which_conditions_count(conditions: list[dict[str, Any]], substance: float,
                                crisis: float) -> None:
    data = ehr_prefetch()
    data["conditions"] = bundle(*[c for c in conditions if c["resourceType"] == "Condition"])
    data["encounters"] = bundle(*[c for c in conditions if c["resourceType"] == "Encounter"])
    got = read(data)
    assert (got.values["substance_use"], got.values["prior_crisis"]) == (substance, crisis)


def test_sessions_count_encounters_of_the_last_12_months() -> None:
    data = ehr_prefetch()
    data["encounters"] = bundle(
        encounter("a", 0), encounter("b", 364), encounter("c", 366),
        encounter("d", 2, "cancelled"), encounter("e", 2, "entered-in-error"),
        encounter("f", 2, subject={"reference": "Patient/x"}),
        {**encounter("g", 2), "period": {}},
    )
    assert read(data).values["num_sessions"] == 2.0
    data["encounters"] = bundle(*(encounter(f"x{i}", i % 300) for i in range(80)))
    data["more"] = data["encounters"]  # the same Encounters under two keys count once
    assert read(data).values["num_sessions"] == 50.0  # the feature's public upper bound
    # An Observation's explicit count (the local code, as before) wins over counted Encounters.
    data["num_sessions"] = observation("s", "https://dpcrisis.dev/fhir/CodeSystem/crisis-features",
                                       "num_sessions", "2026-01-01", valueInteger=7)
    assert read(data).values["num_sessions"] == 7.0


def test_null_and_empty_are_no_data_and_left_out_keys_are_absent() -> None:
    data = ehr_prefetch()
    data.update(phq9=None, conditions=None, encounters=bundle())
    got = read(data)
    assert [f.name for f in got.missing] == ["phq9"]
    assert got.values["substance_use"] == got.values["prior_crisis"] == 0.0
    assert got.values["num_sessions"] == 0.0
    data.pop("conditions")
    data.pop("encounters")
    assert [f.name for f in read(data).absent] == ["num_sessions", "substance_use",
                                                   "prior_crisis"]


@pytest.fixture
def ehr(monkeypatch: pytest.MonkeyPatch) -> Ehr:
    ehr = Ehr()
    monkeypatch.setattr(settings, "dpcrisis_cds_base_url", "http://testserver")
    monkeypatch.setattr(settings, "dpcrisis_cds_clients", [CdsClient(iss=ehr.iss,
                                                                      jwks=ehr.jwks)])
    return ehr


def test_an_ehr_call_with_conditions_and_encounters_is_scored(
    client: TestClient, run_worker: Any, ehr: Ehr
) -> None:
    (model_id,) = train_models(client, run_worker)
    plain = client.post("/v1/risk", json={"features": PATIENT}).json()  # the same patient
    response = client.post(URL, json=hook_call(prefetch=ehr_prefetch()),
                           headers=bearer(ehr.token()))
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    assert percent(plain["probability"]) in card["summary"]
    assert "substance use recorded" in card["detail"] and "prior crisis recorded" in card["detail"]
    assert "12 sessions in the last 12 months" in card["detail"]
    events = client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"]
    assert [(e["actor"], e["detail"]["endpoint"]) for e in events][0] == (
        f"cds:{ehr.iss}", "cds-services")
    assert model_id


@pytest.mark.parametrize("empty", [None, {"resourceType": "Bundle", "type": "searchset",
                                          "total": 0}])
def test_no_data_is_an_insufficient_data_card(
    client: TestClient, run_worker: Any, empty: Any
) -> None:
    train_models(client, run_worker)
    data = {key: empty for key in ehr_prefetch()}  # every key sent, none with data
    response = client.post(URL, json=hook_call(prefetch=data))
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    assert "insufficient data" in card["summary"] and card["indicator"] == "info"
    for lacking in ("`age`", "`phq9`", "`gaf`"):
        assert lacking in card["detail"]
    assert "`prior_crisis`" not in card["detail"]  # no Condition is a no, not missing data
    events = client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"]
    assert events == []


def test_a_patient_below_the_minimum_band_gets_no_card_unless_asked(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (model_id,) = train_models(client, run_worker)
    p = client.post("/v1/risk", json={"features": PATIENT}).json()["probability"]
    assert client.put(f"/v1/models/{model_id}/band-thresholds", json={
        "low_medium": p / 2, "medium_high": (1 + p) / 2}).status_code == 200  # a medium patient
    default = hook_call(prefetch=ehr_prefetch())
    default.pop("extension")
    assert len(client.post(URL, json=default).json()["cards"]) == 1  # medium >= medium
    monkeypatch.setattr(settings, "dpcrisis_cds_min_band", "high")
    assert client.post(URL, json=default).json() == {"cards": []}
    (svc,) = client.get("/cds-services").json()["services"]
    assert svc["extension"]["dev.dpcrisis.min-band"] == "high"
    asks = hook_call(prefetch=ehr_prefetch(), extension={"dev.dpcrisis.min-band": "medium"})
    (card,) = client.post(URL, json=asks).json()["cards"]
    assert card["indicator"] == "info" and card["summary"].startswith("Medium risk")
    bad = hook_call(prefetch=ehr_prefetch(), extension={"dev.dpcrisis.min-band": "lowest"})
    assert client.post(URL, json=bad).status_code == 422
    # Scored patients are audited whether or not a card is shown.
    events = client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"]
    assert [e["detail"]["endpoint"] for e in events].count("cds-services") == 3


def test_discovery_documents_the_mapping(client: TestClient) -> None:
    (svc,) = client.get("/cds-services").json()["services"]
    codes = {c["feature"]: c for c in svc["extension"]["dev.dpcrisis.feature-codes"]}
    assert codes["prior_crisis"]["resource"] == "Condition"
    assert codes["prior_crisis"]["prefetch"] == "conditions"
    assert {"system": SNOMED, "code": "82313006", "display": "Suicide attempt (event)",
            "below": False} in codes["prior_crisis"]["codes"]
    assert {(c["system"], c["code"]) for c in codes["substance_use"]["codes"]} >= {
        (ICD10CM, "F10"), (SNOMED, "66214007")}
    assert codes["num_sessions"]["resource"] == "Encounter"
    assert codes["age"]["resource"] == "Patient" and codes["phq9"]["resource"] == "Observation"
    assert "Conditions" in svc["description"] and "Encounters" in svc["description"]
