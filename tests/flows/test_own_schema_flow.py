"""A clinic's own schema end to end in one process: register, upload, train, score, erase.

The schema has a categorical feature (one Shapley player, three one-hot inputs), a numeric one
with a narrowed model range, an integer and a binary one; the model, its artifact and scoring
all follow it, and a patient of the crisis schema is refused with the model's own features.
"""

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.api.scoring_helpers import problem
from tests.conftest import FAST_TRAINING, PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "phq9", "label": "PHQ-9", "kind": "integer", "lower": 0, "upper": 27,
         "reference": 5, "unit": "points",
         "code": {"system": "http://loinc.org", "code": "44261-6", "display": "PHQ-9 total"}},
        {"name": "sex", "label": "Sex", "kind": "categorical",
         "categories": ["female", "male", "other"], "reference": "female"},
        {"name": "bmi", "label": "BMI", "kind": "numeric", "lower": 10, "upper": 80,
         "model_upper": 45, "reference": 24.5, "unit": "kg/m2"},
        {"name": "prior_crisis", "label": "Prior crisis", "kind": "binary", "reference": 0},
    ],
    "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days", "positive": 1,
                "bands": {"low_medium": 0.1, "medium_high": 0.3}},
    "subgroups": ["sex"],
    "id_column": "patient_id",
}
SEXES = ["female", "male", "other"]
ONE = {"phq9": 22, "sex": "male", "bmi": 31.5, "prior_crisis": 1}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    phq9 = rng.integers(0, 28, n)
    sex = rng.integers(0, 3, n)
    bmi = np.round(rng.uniform(15, 60, n), 1)
    prior = rng.integers(0, 2, n)
    logit = -3.0 + 0.15 * phq9 + 0.8 * (sex == 1) + 1.2 * prior
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pa.table({"patient_id": [f"p{i}" for i in range(n)], "phq9": phq9,
                     "sex": [SEXES[s] for s in sex], "bmi": bmi, "prior_crisis": prior,
                     "crisis_30d": y})


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _ready_dataset(client: TestClient) -> dict[str, Any]:
    created = client.post("/v1/datasets", json={
        "name": "clinic", "source": {"kind": "upload"}, "schema": SCHEMA,
        "privacy_budget": {"epsilon": 8, "delta": 1e-5}})
    assert created.status_code == 201, created.text
    answer = client.put(f"/v1/datasets/{created.json()['id']}/data", content=_parquet(_table(4000)),
                        headers={"Content-Type": "application/vnd.apache.parquet"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _train(client: TestClient, run_worker: Any, dataset_id: int, model: str) -> dict[str, Any]:
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                        "privacy": {"target_epsilon": 3},
                                        "training": {**FAST_TRAINING, "model": model}})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    assert done["status"] == "succeeded", done
    return client.get(f"/v1/models/{done['model_id']}").json()


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_a_declared_schema_trains_and_scores_with_its_own_features(
    client: TestClient, run_worker: Any, kind: str
) -> None:
    dataset = _ready_dataset(client)
    model = _train(client, run_worker, dataset["id"], kind)
    assert model["features"] == ["phq9", "sex", "bmi", "prior_crisis"]
    assert model["schema"]["features"][1]["categories"] == SEXES
    assert model["schema_hash"] == dataset["schema_hash"]

    scored = client.post("/v1/risk", json={"features": ONE, "model_id": model["id"]})
    assert scored.status_code == 200, scored.text
    body = scored.json()
    by_name = {c["feature"]: c for c in body["contributions"]}
    assert set(by_name) == set(ONE)  # one contribution per declared feature, sex included
    assert by_name["sex"]["value"] == "male" and by_name["sex"]["reason"] == "Sex: male"
    assert by_name["prior_crisis"]["reason"] == "prior crisis recorded"
    total = body["reference"]["log_odds"] + sum(c["contribution"] for c in by_name.values())
    assert total == pytest.approx(body["log_odds"], abs=1e-6)
    assert body["reference"]["features"]["sex"] == "female"
    assert body["reference"]["explanation"]["method"] == "exact"

    reference = {"phq9": 5, "sex": "female", "bmi": 24.5, "prior_crisis": 0}
    at_reference = client.post("/v1/risk", json={"features": reference,
                                                 "model_id": model["id"]}).json()
    assert all(abs(c["contribution"]) < 1e-6 for c in at_reference["contributions"])
    # Beyond the model range (45) a BMI counts as 45: the same score as 45 itself.
    capped = [client.post("/v1/risk", json={"features": {**ONE, "bmi": v},
                                            "model_id": model["id"]}).json()["probability"]
              for v in (45, 70)]
    assert capped[0] == pytest.approx(capped[1], abs=1e-12)


def test_the_model_schema_decides_what_a_patient_must_give(
    client: TestClient, run_worker: Any
) -> None:
    dataset = _ready_dataset(client)
    model = _train(client, run_worker, dataset["id"], "logistic")
    named = {"model_id": model["id"]}
    body = problem(client.post("/v1/risk", json={"features": PATIENT, **named}), 422)
    fields = {e["field"] for e in body["errors"]}
    assert {"features.sex", "features.bmi", "features.age"} <= fields
    problem(client.post("/v1/risk", json={"features": {**ONE, "sex": "unknown"}, **named}),
            422, field="features.sex", allowed="one of ['female', 'male', 'other']")
    problem(client.post("/v1/risk", json={"features": {**ONE, "bmi": 81}, **named}),
            422, field="features.bmi", allowed="[10, 80]")
    batch = client.post("/v1/risk/batch", json={**named, "patients": [
        {"id": "a", "features": ONE}, {"id": 7, "features": {**ONE, "phq9": 30}}]})
    named_fields = {e["field"] for e in problem(batch, 422)["errors"]}
    assert {"patients.1.id", "patients.1.features.phq9"} <= named_fields

    features = client.get("/v1/features", params=named).json()
    assert [f["name"] for f in features] == ["phq9", "sex", "bmi", "prior_crisis"]
    assert features[1]["categories"] == SEXES and features[2]["model_range"] == [10, 45]
    by_dataset = client.get("/v1/features", params={"dataset_id": dataset["id"]}).json()
    assert by_dataset == features


def _bands_of(client: TestClient, model_id: int
              ) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """The batch answer's thresholds, and (probability, band) for a grid of patients."""
    grid = [{**ONE, "phq9": phq9, "sex": sex, "prior_crisis": prior}
            for phq9 in range(28) for sex in ("female", "male") for prior in (0, 1)]
    answer = client.post("/v1/risk/batch?view=compact", json={"model_id": model_id, "patients": [
        {"id": str(i), "features": f} for i, f in enumerate(grid)]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["band_thresholds"], [(r["probability"], r["band"]) for r in body["results"]]


def _band(probability: float, low: float, high: float) -> str:
    return "high" if probability >= high else "medium" if probability >= low else "low"


def test_the_models_bands_are_the_schemas_declared_bands_until_overridden(
    client: TestClient, run_worker: Any
) -> None:
    """Declared 0.1 / 0.3: the model, its DP evaluation and its scores band by them, not by the
    legacy 0.05 / 0.20; a data scientist's PUT still replaces them."""
    dataset = _ready_dataset(client)
    model = _train(client, run_worker, dataset["id"], "logistic")
    declared = {"low_medium": 0.1, "medium_high": 0.3}
    assert model["band_thresholds"] == declared
    assert model["metrics"]["band_thresholds"] == declared  # the DP evaluation's bin edges
    thresholds, scored = _bands_of(client, model["id"])
    assert thresholds == declared
    assert all(band == _band(p, 0.1, 0.3) for p, band in scored)
    assert any(_band(p, 0.1, 0.3) != _band(p, 0.05, 0.2) for p, _ in scored)

    override = {"low_medium": 0.4, "medium_high": 0.7}
    put = client.put(f"/v1/models/{model['id']}/band-thresholds", json=override)
    assert put.status_code == 200, put.text
    assert client.get(f"/v1/models/{model['id']}").json()["band_thresholds"] == override
    thresholds, scored = _bands_of(client, model["id"])
    assert thresholds == override
    assert all(band == _band(p, 0.4, 0.7) for p, band in scored)
    assert any(_band(p, 0.4, 0.7) != _band(p, 0.1, 0.3) for p, _ in scored)


def test_erasing_the_rows_keeps_the_model_and_refuses_new_jobs(
    client: TestClient, run_worker: Any
) -> None:
    dataset = _ready_dataset(client)
    model = _train(client, run_worker, dataset["id"], "logistic")
    erased = client.delete(f"/v1/datasets/{dataset['id']}/data")
    assert erased.status_code in (200, 204), erased.text
    assert client.get(f"/v1/datasets/{dataset['id']}").json()["state"] == "erased"
    scored = client.post("/v1/risk", json={"features": ONE, "model_id": model["id"]})
    assert scored.status_code == 200, scored.text
    refused = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                            "privacy": {"target_epsilon": 1},
                                            "training": FAST_TRAINING})
    problem(refused, 409, field="dataset_id")
