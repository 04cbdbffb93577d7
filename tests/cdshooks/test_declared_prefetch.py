"""CDS Hooks for a clinic's own schema with no standard codes: features declare their prefetch
(a FHIR query and a value path, or the clinic's own Observation code), sex comes from
Patient.gender and age from Patient.birthDate, discovery is built from the schema, and an
"insufficient data" card names exactly the inputs the call lacked."""

import io
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.cdshooks.prefetch import features_from_prefetch, sources_of
from app.core.errors import InvalidRequest
from app.core.settings import settings
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from app.datasets.schema.encoding import encoder_for
from app.datasets.schema.feature_prefetch import FeaturePrefetch
from tests.cdshooks.test_cds_hooks import URL, bundle, hook_call, observation
from tests.declared_upload import train_declared

CODES = "https://clinic.example/fhir/CodeSystem/metabolic"
PATIENT_ID = "pat-42"
TODAY = date(2026, 6, 1)
BMI_QUERY = f"Observation?patient={{{{context.patientId}}}}&code={CODES}|bmi&_sort=-date"
COVERAGE_QUERY = "Coverage?beneficiary=Patient/{{context.patientId}}"
SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "age", "kind": "integer", "lower": 18, "upper": 95, "reference": 50},
        {"name": "sex", "kind": "categorical", "categories": ["F", "M"], "reference": "F"},
        {"name": "bmi", "label": "Body mass index", "kind": "numeric", "lower": 12,
         "upper": 70, "reference": 26, "prefetch": {"query": BMI_QUERY,
                                                    "path": "valueQuantity.value"}},
        {"name": "hba1c", "label": "HbA1c", "kind": "numeric", "lower": 3, "upper": 20,
         "reference": 5.6, "prefetch": {"system": CODES, "code": "hba1c"}},
        {"name": "insured", "label": "Insurance", "kind": "categorical",
         "categories": ["public", "private"], "reference": "public",
         "prefetch": {"query": COVERAGE_QUERY, "path": "type.coding.code"}},
        {"name": "smoker", "label": "Smoker", "kind": "binary", "reference": 0,
         "prefetch": {"query": "Patient/{{context.patientId}}",
                      "path": "extension[1].valueBoolean"}},
    ],
    "outcome": {"name": "admitted_1y", "label": "Admission within a year", "positive": 1,
                "bands": {"low_medium": 0.2, "medium_high": 0.5}},
    "id_column": "patient_id",
}


def _sources() -> Any:
    return sources_of(encoder_for(DatasetSchema.model_validate(SCHEMA)))


def patient(gender: str = "male", smoker: bool = True) -> dict[str, Any]:
    return {"resourceType": "Patient", "id": PATIENT_ID, "birthDate": "1961-03-02",
            "gender": gender, "extension": [{"url": "https://clinic.example/x", "valueString": "x"},
                                            {"url": CODES + "#smoker", "valueBoolean": smoker}]}


def ehr_prefetch(**changes: Any) -> dict[str, Any]:
    """What an EHR sends for the discovery templates, with an older BMI too."""
    data = {
        "patient": patient(),
        "bmi": bundle(observation("b-old", CODES, "bmi", "2024-01-01", valueQuantity={"value": 22}),
                      observation("b-new", CODES, "bmi", "2026-04-01",
                                  valueQuantity={"value": 31.5, "unit": "kg/m2"})),
        "hba1c": bundle(observation("h-1", CODES, "hba1c", "2026-04-01",
                                    valueQuantity={"value": 7.9})),
        "insured": bundle({"resourceType": "Coverage", "id": "cov-1",
                           "beneficiary": {"reference": f"Patient/{PATIENT_ID}"},
                           "type": {"coding": [{"system": CODES, "code": "private"}]}}),
    }
    data.update(changes)
    return data


def read(data: dict[str, Any]) -> Any:
    return features_from_prefetch(data, sources=_sources(), patient_id=PATIENT_ID, today=TODAY)


def test_every_feature_of_the_schema_can_be_prefetched() -> None:
    sources = _sources()
    assert sources.unavailable == ()
    assert sources.templates == {
        "patient": "Patient/{{context.patientId}}",
        "hba1c": f"Observation?patient={{{{context.patientId}}}}&code={CODES}|hba1c"
                 "&_sort=-date&_count=1",
        "bmi": BMI_QUERY,
        "insured": COVERAGE_QUERY,
    }
    assert {name: keys for name, keys in sources.keys.items()} == {
        "age": ("patient",), "sex": ("patient",), "bmi": ("bmi",), "hba1c": ("hba1c",),
        "insured": ("insured",), "smoker": ("patient",)}


def test_values_come_from_the_declared_places() -> None:
    got = read(ehr_prefetch())
    assert got.values == {"age": 65.0, "sex": "M", "bmi": 31.5, "hba1c": 7.9,
                          "insured": "private", "smoker": 1.0}
    assert got.references["bmi"] == "Observation/b-new"
    assert got.references["insured"] == "Coverage/cov-1"
    assert (got.missing, got.absent) == ((), ())
    female = read(ehr_prefetch(patient=patient("female", smoker=False))).values
    assert (female["sex"], female["smoker"]) == ("F", 0.0)


def test_what_is_not_there_is_named() -> None:
    # A gender no category matches, a Coverage of another patient, an empty BMI search.
    other = {"resourceType": "Coverage", "beneficiary": {"reference": "Patient/someone-else"},
             "type": {"coding": [{"code": "public"}]}}
    got = read(ehr_prefetch(patient=patient("other"), insured=bundle(other), bmi=bundle()))
    assert [f.name for f in got.missing] == ["sex", "bmi", "insured"]
    left_out = ehr_prefetch()
    del left_out["hba1c"]
    assert [f.name for f in read(left_out).absent] == ["hba1c"]


def test_an_element_the_model_cannot_use_is_refused() -> None:
    bad = bundle(observation("b-1", CODES, "bmi", "2026-04-01", valueQuantity={"value": "31"}))
    with pytest.raises(InvalidRequest) as refused:
        read(ehr_prefetch(bmi=bad))
    assert refused.value.field == "prefetch.bmi"
    assert refused.value.extra["allowed"] == "[12, 70]"


@pytest.mark.parametrize("spec", [
    {"query": "Observation?patient=123", "path": "valueQuantity.value"},  # no patient token
    {"query": "Observation?patient={{context.patientId}}&u={{context.userId}}", "path": "x"},
    {"query": "Patient/{{context.patientId}}", "path": "name.given; drop"},
    {"query": "Patient/{{context.patientId}}"},
    {"query": "Patient/{{context.patientId}}", "path": "gender", "system": CODES, "code": "x"},
    {"system": CODES},
    {},
])
def test_a_declaration_is_checked(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        FeaturePrefetch.model_validate(spec)


def test_a_schema_without_prefetch_keeps_its_hash() -> None:
    plain = {**SCHEMA, "features": [{k: v for k, v in f.items() if k != "prefetch"}
                                    for f in SCHEMA["features"]]}
    parsed = DatasetSchema.model_validate(plain)
    assert all("prefetch" not in f for f in parsed.model_dump(mode="json")["features"])
    assert schema_hash(parsed) != schema_hash(DatasetSchema.model_validate(SCHEMA))


def _table(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    age, sex = rng.integers(18, 96, n), rng.integers(0, 2, n)
    bmi, hba1c = np.round(rng.uniform(15, 50, n), 1), np.round(rng.uniform(4, 12, n), 1)
    insured, smoker = rng.integers(0, 2, n), rng.integers(0, 2, n)
    logit = -3 + 0.03 * (age - 50) + 0.06 * (bmi - 26) + 0.4 * (hba1c - 5.6) + 0.8 * smoker
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table({"patient_id": [f"m{seed}-{i}" for i in range(n)], "age": age,
                      "sex": [["F", "M"][k] for k in sex], "bmi": bmi, "hba1c": hba1c,
                      "insured": [["public", "private"][k] for k in insured],
                      "smoker": smoker, "admitted_1y": y})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.mark.slow
def test_a_clinic_schema_is_scored_through_cds_hooks(
    client: TestClient, run_worker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    model_id = train_declared(client, run_worker, name="metabolic", schema=SCHEMA,
                              table=_table(3000, 1)).model_id
    (svc,) = client.get("/cds-services").json()["services"]
    assert svc["extension"]["dev.dpcrisis.model-id"] == model_id
    assert svc["extension"]["dev.dpcrisis.not-prefetchable"] == []
    assert svc["prefetch"] == _sources().templates
    description = svc["description"]
    assert "Admission within a year" in description
    assert "Encounter" not in description and "Condition" not in description
    assert "the Patient (birthDate for age; gender for sex; extension[1].valueBoolean for " \
           "Smoker)" in description
    assert f"{COVERAGE_QUERY} (Coverage.type.coding.code, for Insurance)" in description
    codes = {c["feature"]: c for c in svc["extension"]["dev.dpcrisis.feature-codes"]}
    assert (codes["insured"]["resource"], codes["insured"]["path"]) == ("Coverage",
                                                                        "type.coding.code")
    assert (codes["sex"]["resource"], codes["sex"]["path"]) == ("Patient", "gender")

    scored = client.post(URL, json=hook_call(prefetch=ehr_prefetch()))
    assert scored.status_code == 200, scored.text
    (card,) = scored.json()["cards"]
    assert "insufficient data" not in card["summary"] and "Admission" in card["summary"]
    assert "Body mass index" in card["detail"]

    lacking = client.post(URL, json=hook_call(prefetch=ehr_prefetch(
        patient=patient("unknown"), bmi=None)))
    assert lacking.status_code == 200, lacking.text
    (card,) = lacking.json()["cards"]
    assert "insufficient data" in card["summary"]
    assert "- sex (`sex`" in card["detail"] and "- Body mass index (`bmi`" in card["detail"]
    assert "hba1c" not in card["detail"] and "No code or prefetch" not in card["detail"]
