"""Every model-facing output of a clinic's non-crisis model reads the model's own outcome.

A readmission model (90 days, bands 0.1 / 0.3, its own subgroups) is registered, trained and
activated through the API; then each output a person or a client reads about it is fetched: the
model, its statement, the model card and reports (JSON and HTML), the release inventory, scores
(full, batch, compact), the FHIR RiskAssessment and CodeSystems, CDS Hooks discovery and a card,
the OpenAPI document and the dashboard. None may say "crisis" once the product's own name
(dpcrisis) is taken out: the crisis wording lives only in the crisis schema and its generator.
"""

import io
import json
import re
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.dashboard.router import ASSETS
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from tests.declared_upload import train_declared

PRODUCT = re.compile(r"dpcrisis", re.IGNORECASE)
CRISIS = re.compile(r"cris[ie]s", re.IGNORECASE)  # crisis, crises
OTHER_HORIZON = re.compile(r"30[- ]day|30 days", re.IGNORECASE)
HTML = {"Accept": "text/html"}
CLINIC = "https://clinic.example/fhir/CodeSystem/readmission"
WARDS = ["medical", "surgical", "psychiatric"]
LABEL = "Readmission within 90 days"
SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "age", "label": "Age", "kind": "integer", "lower": 18, "upper": 100,
         "reference": 60, "unit": "years",
         "code": {"system": "http://loinc.org", "code": "30525-0", "display": "Age"}},
        {"name": "prior_admissions", "label": "Admissions in the last year", "kind": "integer",
         "lower": 0, "upper": 20, "reference": 0,
         "code": {"system": CLINIC, "code": "prior-admissions"}},
        {"name": "ward", "label": "Discharging ward", "kind": "categorical",
         "categories": WARDS, "reference": "medical",
         "code": {"system": CLINIC, "code": "ward"}},
        {"name": "lives_alone", "label": "Lives alone", "kind": "binary", "reference": 0,
         "code": {"system": CLINIC, "code": "lives-alone"}},
    ],
    "outcome": {
        "name": "readmitted_90d", "label": LABEL, "positive": 1, "horizon_days": 90,
        "code": {"system": CLINIC, "code": "readmit-90d", "display": LABEL},
        "description": "An unplanned readmission to any ward within 90 days of discharge.",
        "bands": {"low_medium": 0.1, "medium_high": 0.3},
    },
    "attributes": [{"name": "site", "label": "Site", "categories": ["north", "south"]}],
    "subgroups": ["site", "ward"],
    "id_column": "patient_id",
}
PATIENT = {"age": 77, "prior_admissions": 4, "ward": "surgical", "lives_alone": 1}
PATIENT_ID = "pat-7"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _parquet(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 101, n)
    admissions = rng.integers(0, 21, n)
    ward = rng.integers(0, 3, n)
    alone = rng.integers(0, 2, n)
    logit = -3.0 + 0.02 * (age - 60) + 0.15 * admissions + 0.5 * (ward == 1) + 0.8 * alone
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table({
        "patient_id": [f"r{i}" for i in range(n)], "age": age, "prior_admissions": admissions,
        "ward": [WARDS[w] for w in ward], "lives_alone": alone,
        "site": [("north", "south")[s] for s in rng.integers(0, 2, n)], "readmitted_90d": y})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _train(client: TestClient, run_worker: Any) -> tuple[int, int, int]:
    """Register, upload, train and activate the readmission model: dataset, job, model ids."""
    trained = train_declared(client, run_worker, name="readmissions", schema=SCHEMA,
                             table=_parquet(3000))
    return trained.dataset_id, trained.job_id, trained.model_id


def _observation(obs_id: str, code: str, **value: Any) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "searchset", "entry": [{"resource": {
        "resourceType": "Observation", "id": obs_id, "status": "final",
        "code": {"coding": [{"system": CLINIC, "code": code}]},
        "subject": {"reference": f"Patient/{PATIENT_ID}"}, "effectiveDateTime": "2026-03-01",
        **value}}]}


def _hook_call() -> dict[str, Any]:
    """A patient-view call with the patient prefetched as discovery asks (every feature coded)."""
    born = date(date.today().year - PATIENT["age"], 1, 1).isoformat()  # type: ignore[operator]
    return {
        "hook": "patient-view", "hookInstance": "5b1f8a64-3c0e-4d7a-9f11-0a2b3c4d5e6f",
        "fhirServer": "https://ehr.example/fhir",
        "context": {"userId": "Practitioner/7", "patientId": PATIENT_ID},
        "extension": {"dev.dpcrisis.min-band": "low"},
        "prefetch": {
            "patient": {"resourceType": "Patient", "id": PATIENT_ID, "birthDate": born},
            "prior_admissions": _observation("a-1", "prior-admissions", valueInteger=4),
            "ward": _observation("w-1", "ward", valueCodeableConcept={"text": "Surgical"}),
            "lives_alone": _observation("l-1", "lives-alone", valueBoolean=True),
        },
    }


def _outputs(client: TestClient, dataset_id: int, job_id: int,
             model_id: int) -> dict[str, Any]:
    """Each model-facing output by name: the response (its status is checked by the caller)."""
    one = {"features": PATIENT}
    batch = {"patients": [{"id": "a", "features": PATIENT}]}
    outputs: dict[str, Any] = {
        "GET /v1/models/{id}": client.get(f"/v1/models/{model_id}"),
        "GET /v1/models/active": client.get("/v1/models/active"),
        "GET /v1/models": client.get("/v1/models"),
        "GET /v1/features": client.get("/v1/features"),
        "job privacy report JSON": client.get(f"/v1/jobs/{job_id}/privacy-report"),
        "job privacy report HTML": client.get(f"/v1/jobs/{job_id}/privacy-report",
                                              headers=HTML),
        "dataset privacy report JSON": client.get(f"/v1/datasets/{dataset_id}/privacy-report"),
        "dataset privacy report HTML": client.get(f"/v1/datasets/{dataset_id}/privacy-report",
                                                  headers=HTML),
        "GET /v1/datasets/{id}": client.get(f"/v1/datasets/{dataset_id}"),
        "GET /v1/jobs/{id}": client.get(f"/v1/jobs/{job_id}"),
        "release inventory": client.get("/v1/privacy/inventory"),
        "POST /v1/risk": client.post("/v1/risk", json=one),
        "POST /v1/risk/batch": client.post("/v1/risk/batch", json=batch),
        "POST /v1/risk/batch?view=compact": client.post("/v1/risk/batch?view=compact",
                                                        json=batch),
        "POST /v1/risk/fhir": client.post("/v1/risk/fhir",
                                          json={**one, "subject": f"Patient/{PATIENT_ID}"}),
        "GET /fhir/CodeSystem": client.get("/fhir/CodeSystem"),
        "GET /cds-services": client.get("/cds-services"),
        "POST /cds-services/{id}": None,  # filled in below, from discovery
        "GET /openapi.json": client.get("/openapi.json"),
        "GET /dashboard": client.get("/dashboard"),
        "GET /dashboard/privacy": client.get("/dashboard/privacy"),
    }
    (service,) = outputs["GET /cds-services"].json()["services"]
    outputs["POST /cds-services/{id}"] = client.post(f"/cds-services/{service['id']}",
                                                     json=_hook_call())
    for entry in outputs["GET /fhir/CodeSystem"].json().get("entry", []):
        code_system = entry["resource"]["id"]
        outputs[f"GET /fhir/CodeSystem/{code_system}"] = client.get(
            f"/fhir/CodeSystem/{code_system}")
    for name in ASSETS:
        outputs[f"GET /dashboard/static/{name}"] = client.get(f"/dashboard/static/{name}")
    return outputs


def _without_builtin_examples(node: Any) -> Any:
    """The OpenAPI document less the request examples that are a patient of the built-in
    schema (their descriptions say so): feature names such as prior_crisis are that schema's
    own columns, not words about this model."""
    builtin = set(BUILT_IN_SCHEMA.feature_names)
    if isinstance(node, list):
        return [_without_builtin_examples(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _without_builtin_examples(value) for key, value in node.items()
            if not (key in ("example", "examples") and _patients_of(value, builtin))}


def _patients_of(value: Any, names: set[str]) -> bool:
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(i, dict) and set(i) == names for i in items)


def _hits(pattern: re.Pattern[str], outputs: dict[str, str]) -> list[str]:
    """Each match as 'output: ...context...'."""
    found = []
    for name, text in outputs.items():
        for match in pattern.finditer(text):
            start, end = max(match.start() - 70, 0), match.end() + 70
            found.append(f"{name}: ...{text[start:end]}...")
    return found


@pytest.mark.slow
def test_no_output_of_a_readmission_model_speaks_of_a_crisis(
    client: TestClient, run_worker: Any
) -> None:
    dataset_id, job_id, model_id = _train(client, run_worker)
    responses = _outputs(client, dataset_id, job_id, model_id)
    failed = {name: r.status_code for name, r in responses.items() if r.status_code != 200}
    assert not failed, failed
    texts = {name: PRODUCT.sub("", r.text) for name, r in responses.items()}
    openapi = _without_builtin_examples(responses["GET /openapi.json"].json())
    texts["GET /openapi.json"] = PRODUCT.sub("", json.dumps(openapi))

    card = responses["job privacy report JSON"].json()["model_card"]
    assert card["outcome"] == LABEL
    assert card["intended_use"]["purpose"] == (
        "Flag patients at elevated risk of readmission within 90 days for clinician review. "
        "Outcome: An unplanned readmission to any ward within 90 days of discharge.")
    caveats = " ".join(card["caveats"])
    assert "only its 4 declared features; the risk of readmission within 90 days" in caveats
    assert "declared subgroups (site, discharging ward)" in caveats
    page = responses["job privacy report HTML"].text
    assert f"positives: {LABEL} (noisy count)" in page
    assert LABEL in responses["GET /cds-services"].text
    assert responses["POST /v1/risk"].json()["band_thresholds"] == {
        "low_medium": 0.1, "medium_high": 0.3}

    hits = _hits(CRISIS, texts) + _hits(OTHER_HORIZON, texts)
    assert not hits, "\n".join(hits)
