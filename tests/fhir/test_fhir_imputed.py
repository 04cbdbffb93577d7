"""POST /v1/risk/fhir scores a patient without an Observation for a feature declared
``"missing": "reference"`` at its reference value; the RiskAssessment says which inputs were
imputed (a basis display and a note), and stays valid R4."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.fhir.clinic_model import PATIENT, train_clinic_model
from tests.fhir.r4 import outcome, valid
from tests.fhir.test_fhir_schema import extensions

NO_SLEEP = {k: v for k, v in PATIENT.items() if k != "sleep_hours"}


@pytest.fixture
def imputing(client: TestClient, run_worker: Any, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return train_clinic_model(client, run_worker, imputed=True)


def test_a_missing_observation_is_scored_at_the_reference(
    client: TestClient, imputing: int
) -> None:
    given = client.post("/v1/risk/fhir", json={
        "features": {**PATIENT, "sleep_hours": 7.5}, "subject": "Patient/7"}).json()
    response = client.post("/v1/risk/fhir", json={
        "features": NO_SLEEP, "subject": "Patient/7", "basis": {"phq9": "Observation/p"}})
    assert response.status_code == 200, response.text
    ra = response.json()
    valid(ra)
    assert ra["prediction"][0]["probabilityDecimal"] == given["prediction"][0][
        "probabilityDecimal"]
    sleep = ra["basis"][3]
    assert extensions(sleep)[1] == {"valueDecimal": 7.5}
    assert sleep["display"].startswith("Sleep not given: scored at the reference value 7.5")
    notes = [n["text"] for n in ra["note"]]
    assert notes[-1].startswith("Imputed inputs:") and notes[-1].endswith("Sleep (sleep_hours).")
    assert not any(n.startswith("Imputed") for n in (x["text"] for x in given["note"]))
    # A required feature is still required.
    outcome(client.post("/v1/risk/fhir", json={"features": {**NO_SLEEP, "living": None}}),
            422, field="features.living")
