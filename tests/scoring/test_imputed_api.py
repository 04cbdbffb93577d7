"""POST /v1/risk and /v1/risk/batch score a patient who leaves out (or sends null for) a
feature declared ``"missing": "reference"``, on a model trained on rows where it was empty,
exactly as if the reference value had been sent; a required feature still answers 422."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.api.scoring_helpers import problem
from tests.fhir.clinic_model import PATIENT, SCHEMA, train_clinic_model

REFERENCE = {f["name"]: f["reference"] for f in SCHEMA["features"]}
AT_REFERENCE = {**PATIENT, "phq9": REFERENCE["phq9"], "sleep_hours": REFERENCE["sleep_hours"]}
LEFT_OUT = {k: v for k, v in PATIENT.items() if k not in ("phq9", "sleep_hours")}
NULLS = {**PATIENT, "phq9": None, "sleep_hours": None}


@pytest.fixture
def imputing(client: TestClient, run_worker: Any, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> int:
    """The clinic's model with PHQ-9 and sleep imputable (and empty in some training rows)."""
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return train_clinic_model(client, run_worker, imputed=True)


def _same_score(mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert mine["probability"] == pytest.approx(theirs["probability"], abs=1e-12)
    assert mine["band"] == theirs["band"]
    assert {c["feature"]: c["value"] for c in mine["contributions"]} == {
        c["feature"]: c["value"] for c in theirs["contributions"]}


def test_single_and_batch_score_a_left_out_feature_at_its_reference(
    client: TestClient, imputing: int
) -> None:
    explicit = client.post("/v1/risk", json={"features": AT_REFERENCE}).json()
    assert explicit["imputed"] == [] and not any(c["imputed"] for c in explicit["contributions"])
    for features in (LEFT_OUT, NULLS):
        answer = client.post("/v1/risk", json={"features": features})
        assert answer.status_code == 200, answer.text
        scored = answer.json()
        _same_score(scored, explicit)
        assert scored["imputed"] == ["phq9", "sleep_hours"]
        by_name = {c["feature"]: c for c in scored["contributions"]}
        assert by_name["phq9"]["imputed"] and not by_name["age"]["imputed"]
        assert by_name["sleep_hours"]["reason"] == (
            "Sleep not given: scored at the reference value 7.5 hours a night")

    patients = [{"id": "given", "features": AT_REFERENCE}, {"id": "out", "features": LEFT_OUT},
                {"id": "null", "features": NULLS},
                {"id": "some", "features": {**PATIENT, "sleep_hours": None}}]
    for view in ("full", "compact"):
        batch = client.post(f"/v1/risk/batch?view={view}", json={"patients": patients})
        assert batch.status_code == 200, batch.text
        results = batch.json()["results"]
        assert [r["imputed"] for r in results] == [
            [], ["phq9", "sleep_hours"], ["phq9", "sleep_hours"], ["sleep_hours"]]
        assert results[1]["probability"] == pytest.approx(explicit["probability"], abs=1e-12)
        assert results[2]["probability"] == pytest.approx(explicit["probability"], abs=1e-12)


def test_a_required_feature_is_still_required(client: TestClient, imputing: int) -> None:
    no_age = {k: v for k, v in LEFT_OUT.items() if k != "age"}
    problem(client.post("/v1/risk", json={"features": no_age}), 422, field="features.age",
            allowed="[18, 90]")
    problem(client.post("/v1/risk", json={"features": {**NULLS, "living": None}}), 422,
            field="features.living")
    batch = client.post("/v1/risk/batch", json={"patients": [
        {"features": LEFT_OUT}, {"features": {**LEFT_OUT, "prior_crisis": None}}]})
    problem(batch, 422, field="patients.1.features.prior_crisis")
    features = {f["name"]: f["missing"] for f in client.get("/v1/features").json()}
    assert features == {"age": "error", "phq9": "reference", "living": "error",
                        "sleep_hours": "reference", "prior_crisis": "error"}
