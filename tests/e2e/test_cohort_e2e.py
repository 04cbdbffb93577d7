"""Own-schema cohorts through a real ``dpcrisis serve`` (SQLite, embedded worker): register,
upload, train, score, erase.

Two datasets with declared schemas: a real public table, scikit-learn's Wisconsin breast cancer
data (569 rows, 30 numeric features, malignant = 1), sent as CSV; and a synthetic clinic table
with a categorical feature (3,000 rows), sent as Parquet. A default job trains a model on each;
each model scores through ``/v1/risk``, ``/v1/risk/batch`` and ``/v1/risk/fhir`` with its own
features, and ``/v1/features`` lists its schema. Erasing a dataset's rows leaves its model
scoring. The server and the trained models are shared by the module (``live_server``, from
``tests.e2e.cohort``, is the fixture a browser test can reuse).
"""

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.cohort import (
    CLINIC_SCHEMA,
    CSV,
    PARQUET,
    SITES,
    LiveServer,
    assert_additive,
    breast_cancer_csv,
    breast_cancer_rows,
    breast_cancer_schema,
    clinic_parquet,
    live_server,
    register_upload,
    stored_tables,
    train,
)

pytestmark = pytest.mark.slow  # a served process imports torch and trains two models: ~15 s

__all__ = ["live_server"]  # the fixture, imported so pytest finds it here

FHIR_JSON = "application/fhir+json"


@dataclass(frozen=True)
class Cohort:
    dataset: dict[str, Any]
    model: dict[str, Any]
    schema: dict[str, Any]
    patients: list[dict[str, Any]]

    @property
    def names(self) -> list[str]:
        return [f["name"] for f in self.schema["features"]]


def _breast_cancer_patients() -> list[dict[str, Any]]:
    """Three of the (public) table's own specimens, as a request sends them."""
    header, rows = breast_cancer_rows()
    return [dict(zip(header[1:-1], row[1:-1], strict=True)) for row in (rows[0], rows[19],
                                                                         rows[300])]


CLINIC_PATIENTS = [
    {"phq9": 22, "site": "south", "sleep_hours": 4.5, "prior_crisis": 1},
    {"phq9": 3, "site": "north", "sleep_hours": 8, "prior_crisis": 0},
    {"phq9": 14, "site": "east", "sleep_hours": 20, "prior_crisis": 0},  # above model_upper
]


@pytest.fixture(scope="module")
def cohorts(live_server: LiveServer) -> dict[str, Cohort]:
    """Both datasets registered, uploaded and trained once for the module."""
    cancer_schema = breast_cancer_schema()
    with live_server.client() as http:
        cancer = register_upload(http, "wdbc", cancer_schema, breast_cancer_csv(), CSV)
        clinic = register_upload(http, "clinic", CLINIC_SCHEMA, clinic_parquet(), PARQUET)
        return {
            "wdbc": Cohort(cancer, train(live_server, http, cancer["id"]), cancer_schema,
                           _breast_cancer_patients()),
            "clinic": Cohort(clinic, train(live_server, http, clinic["id"]), CLINIC_SCHEMA,
                             CLINIC_PATIENTS),
        }


def test_uploads_are_ready_split_and_stored_once(
    live_server: LiveServer, cohorts: dict[str, Cohort]
) -> None:
    for name, rows in (("wdbc", 569), ("clinic", 3000)):
        dataset = cohorts[name].dataset
        assert dataset["state"] == "ready" and dataset["rows"] == rows
        assert dataset["source"] == {"kind": "upload", "n_rows": rows, "seed": None,
                                     "datasets": None}
        parts = (dataset["training_rows"], dataset["calibration_rows"],
                 dataset["evaluation_rows"])
        assert all(p > 0 for p in parts) and sum(parts) == rows
        assert [f["name"] for f in dataset["schema"]["features"]] == cohorts[name].names
    # no missing value in the public table (the PUT's answer counts imputations per feature)
    assert not any(cohorts["wdbc"].dataset["imputed"].values())
    with live_server.client() as http:
        # The same rows again, made public: a public table has no budget at all, so a 409 (a
        # private re-upload would share its patients' spend instead).
        again = http.post("/v1/datasets", json={
            "name": "wdbc-again", "source": {"kind": "upload"},
            "schema": breast_cancer_schema(), "public": True})
        assert again.status_code == 201, again.text
        refused = http.put(f"/v1/datasets/{again.json()['id']}/data",
                           content=breast_cancer_csv(),
                           headers={"Content-Type": CSV, "Prefer": "wait=60"})
        assert refused.status_code == 409, refused.text
        assert refused.json()["existing_dataset_id"] == cohorts["wdbc"].dataset["id"]
        states = [d["state"] for d in http.get("/v1/datasets").json()["items"]]
    assert states.count("awaiting_data") >= 1  # the refused one: nothing was stored
    assert len(stored_tables(live_server)) == states.count("ready")


def test_the_first_model_is_active_and_each_keeps_its_schema(
    live_server: LiveServer, cohorts: dict[str, Cohort]
) -> None:
    with live_server.client() as http:
        assert http.get("/v1/models/active").json()["id"] == cohorts["wdbc"].model["id"]
        for cohort in cohorts.values():
            model = cohort.model
            assert model["features"] == cohort.names
            assert model["schema_hash"] == cohort.dataset["schema_hash"]
            assert [f["name"] for f in model["schema"]["features"]] == cohort.names
            listed = http.get("/v1/features", params={"model_id": model["id"]})
            assert listed.status_code == 200, listed.text
            features = listed.json()
            assert [f["name"] for f in features] == cohort.names
            for declared, served in zip(cohort.schema["features"], features, strict=True):
                assert served["type"] == declared["kind"]
                if declared["kind"] in ("numeric", "integer"):
                    assert [served["minimum"], served["maximum"]] == [declared["lower"],
                                                                      declared["upper"]]
        site = next(f for f in http.get("/v1/features", params={
            "model_id": cohorts["clinic"].model["id"]}).json() if f["name"] == "site")
        assert site["categories"] == SITES


def _score_all_ways(http: httpx.Client, cohort: Cohort) -> None:
    model_id = cohort.model["id"]
    singles = []
    for patient in cohort.patients:
        scored = http.post("/v1/risk", json={"features": patient, "model_id": model_id})
        assert scored.status_code == 200, scored.text
        body = scored.json()
        assert body["model"]["id"] == model_id and 0 <= body["probability"] <= 1
        assert 0 < body["model"]["epsilon"] <= 3  # the job's target
        assert_additive(body, body["reference"], cohort.names)
        singles.append(body)
    batch = http.post("/v1/risk/batch", json={"model_id": model_id, "patients": [
        {"id": f"pt-{i}", "features": p} for i, p in enumerate(cohort.patients)]})
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert [r["id"] for r in results] == [f"pt-{i}" for i in range(len(cohort.patients))]
    for single, result in zip(singles, results, strict=True):
        assert_additive(result, batch.json()["reference"], cohort.names)
        # float32 forward passes over 1 row (a vector product) and over 3 (a matrix product)
        # sum 30 inputs in other orders: each order is within 30 float32 roundings (6e-8) of
        # the inputs' summed magnitudes (tens of log-odds on this table), so the log-odds may
        # differ by ~1e-5 where the terms cancel, the probability by a quarter of that.
        assert result["probability"] == pytest.approx(single["probability"], abs=1e-5)

    fhir = http.post("/v1/risk/fhir", json={"features": cohort.patients[0],
                                            "model_id": model_id, "subject": "Patient/pt-0"})
    assert fhir.status_code == 200, fhir.text
    assert fhir.headers["content-type"].startswith(FHIR_JSON)
    resource = fhir.json()
    assert resource["resourceType"] == "RiskAssessment"
    assert resource["subject"] == {"reference": "Patient/pt-0"}
    (prediction,) = resource["prediction"]
    # FHIR gives the probability to the model's real precision: 3 significant digits.
    assert prediction["probabilityDecimal"] == float(f"{singles[0]['probability']:.3g}")
    assert len(resource["basis"]) == len(cohort.names)  # one Observation per schema feature


@pytest.mark.parametrize("name", ["wdbc", "clinic"])
def test_each_model_scores_its_own_features_every_way(
    live_server: LiveServer, cohorts: dict[str, Cohort], name: str
) -> None:
    with live_server.client() as http:
        _score_all_ways(http, cohorts[name])


def test_erasing_the_rows_keeps_the_model_scoring(
    live_server: LiveServer, cohorts: dict[str, Cohort]
) -> None:
    cohort = cohorts["wdbc"]
    dataset_id, model_id = cohort.dataset["id"], cohort.model["id"]
    before = stored_tables(live_server)
    with live_server.client() as http:
        erased = http.delete(f"/v1/datasets/{dataset_id}/data")
        assert erased.status_code in (200, 204), erased.text
        after = http.get(f"/v1/datasets/{dataset_id}").json()
        assert after["state"] == "erased" and after["data_erased_at"] is not None
        assert len(stored_tables(live_server)) == len(before) - 1  # its table is gone
        scored = http.post("/v1/risk", json={"features": cohort.patients[1],
                                             "model_id": model_id})
        assert scored.status_code == 200, scored.text
        assert_additive(scored.json(), scored.json()["reference"], cohort.names)
        refused = http.post("/v1/jobs", json={"dataset_id": dataset_id,
                                              "privacy": {"target_epsilon": 1}})
        assert refused.status_code == 409, refused.text
        assert http.get(f"/v1/models/{model_id}").status_code == 200
