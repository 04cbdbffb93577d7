"""CDS Hooks for a model of a clinic's own non-crisis outcome: discovery and cards name that
outcome (its window when declared), the topic follows the outcome, the indicator follows the
band and is never critical, and nothing says "crisis" (the product's name and the service id,
identifiers EHRs registered, aside)."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cdshooks.service import LEGACY_SERVICE_IDS, SERVICE_ID
from app.core.settings import settings
from app.fhir.codes import OUTCOME_TOPIC_CODE, TOPIC_SYSTEM
from app.fhir.service import percent
from tests.cdshooks.test_cds_hooks import URL, birth_date_for, bundle, hook_call, observation
from tests.fhir.utilisation_model import (
    CLINIC,
    LABEL,
    OUTCOME_CODE,
    PATIENT,
    VISITS_CODE,
    train_utilisation_model,
)

IDENTIFIERS = re.compile(f"{SERVICE_ID}|dpcrisis", re.IGNORECASE)
CRISIS = re.compile("crisis", re.IGNORECASE)
INDICATORS = {"low": "info", "medium": "info", "high": "warning"}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def crisis_words(body: Any) -> list[str]:
    text = IDENTIFIERS.sub("", json.dumps(body))
    return [text[max(m.start() - 60, 0): m.end() + 60] for m in CRISIS.finditer(text)]


def prefetch() -> dict[str, Any]:
    """The PATIENT as an EHR sends what discovery asks for."""
    return {
        "patient": {"resourceType": "Patient", "id": "pat-42",
                    "birthDate": birth_date_for(PATIENT["age"])},  # type: ignore[arg-type]
        "visits": bundle(observation("v-1", VISITS_CODE["system"], VISITS_CODE["code"],
                                     "2026-03-01", valueInteger=PATIENT["visits"])),
        "housing": bundle(observation("h-1", CLINIC, "housing", "2026-03-01",
                                      valueCodeableConcept={"text": PATIENT["housing"]})),
        "chronic": bundle(observation("c-1", CLINIC, "chronic", "2026-03-01",
                                      valueBoolean=True)),
    }


def cut_offs_for(band: str, p: float) -> dict[str, float]:
    """Cut-offs that put a patient of probability ``p`` in ``band``."""
    return {"low": {"low_medium": (1 + p) / 2, "medium_high": (3 + p) / 4},
            "medium": {"low_medium": p / 2, "medium_high": (1 + p) / 2},
            "high": {"low_medium": p / 3, "medium_high": p / 2}}[band]


def test_a_coded_outcome_with_a_window(client: TestClient, run_worker: Any) -> None:
    model_id = train_utilisation_model(client, run_worker, horizon=True, coded=True,
                                       visits_coded=True)
    discovery = client.get("/cds-services").json()
    (svc,) = discovery["services"]
    assert svc["id"] == SERVICE_ID  # the registered id, kept
    assert svc["title"] == f"Risk: {LABEL}" and LABEL in svc["description"]
    assert set(svc["prefetch"]) == {"patient", "visits", "housing", "chronic"}
    assert not crisis_words(discovery), crisis_words(discovery)

    p = client.post("/v1/risk", json={"features": PATIENT}).json()["probability"]
    for band, indicator in INDICATORS.items():
        assert client.put(f"/v1/models/{model_id}/band-thresholds",
                          json=cut_offs_for(band, p)).status_code == 200
        response = client.post(URL, json=hook_call(prefetch=prefetch()))
        assert response.status_code == 200, response.text
        (card,) = response.json()["cards"]
        assert card["indicator"] == indicator, band
        assert card["summary"] == (f"{band.capitalize()} risk ({LABEL}): {percent(p)} "
                                   f"(DP model {model_id})")
        assert f"Outcome: {LABEL}, within 365 days of this assessment." in card["detail"]
        assert LABEL in card["source"]["label"]
        # The outcome's own coding is the topic: the same for every model of that outcome.
        assert card["source"]["topic"] == OUTCOME_CODE
        assert not crisis_words(response.json()), crisis_words(response.json())


def test_an_outcome_without_code_or_window(client: TestClient, run_worker: Any) -> None:
    train_utilisation_model(client, run_worker, visits_coded=True)
    response = client.post(URL, json=hook_call(prefetch=prefetch()))
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    assert f"Outcome: {LABEL}, no time window declared." in card["detail"]
    topic = card["source"]["topic"]
    assert (topic["system"], topic["code"]) == (TOPIC_SYSTEM, OUTCOME_TOPIC_CODE)
    assert not crisis_words(response.json()), crisis_words(response.json())


def test_the_first_releases_crisis_id_never_serves_another_outcome(
        client: TestClient, run_worker: Any) -> None:
    """The id an EHR registered before outcomes were declared names a crisis risk: with a model
    of another outcome active, a call on it is a 404 pointing at the outcome-neutral id, and
    nothing is scored."""
    train_utilisation_model(client, run_worker, visits_coded=True)
    refused = client.post(f"/cds-services/{LEGACY_SERVICE_IDS[0]}",
                          json=hook_call(prefetch=prefetch()))
    assert refused.status_code == 404, refused.text
    assert SERVICE_ID in refused.json()["detail"] and LABEL in refused.json()["detail"]
    assert client.post(URL, json=hook_call(prefetch=prefetch())).status_code == 200
