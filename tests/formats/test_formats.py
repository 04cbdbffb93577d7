"""Score output formats by media type: the scoring routes render one typed answer in the
format the request's Accept prefers (JSON by default, a FHIR RiskAssessment, CSV), answer 406
for a format they do not offer, and say so in OpenAPI."""

import csv
import io
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.fhir.service import rounded
from app.formats import registry
from app.formats.registry import NotAcceptable
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT
from tests.scoring.test_risk_batch import random_patients


@pytest.mark.parametrize(("accept", "kind", "media_type"), [
    (None, "single", "application/json"),
    ("", "batch", "application/json"),
    ("*/*", "batch", "application/json"),
    ("text/*", "batch", "text/csv"),
    ("text/csv;q=0.5, application/json", "batch", "application/json"),
    ("application/json;q=0.2, text/csv", "batch", "text/csv"),
    ("application/fhir+json", "single", "application/fhir+json"),
    ("application/fhir+json, */*;q=0.1", "batch", "application/json"),
    ("application/problem+json", "batch", "application/json"),  # how it reads errors
])
def test_the_preferred_format_is_chosen(accept: str | None, kind: Any, media_type: str) -> None:
    assert registry.choose(accept, kind).media_type == media_type


@pytest.mark.parametrize(("accept", "kind"), [
    ("application/xml", "single"), ("application/fhir+json", "batch"),
    ("text/csv;q=0, application/json;q=0", "batch"),
])
def test_an_unoffered_format_is_not_acceptable(accept: str, kind: Any) -> None:
    with pytest.raises(NotAcceptable) as refused:
        registry.choose(accept, kind)
    assert refused.value.field == "Accept"
    assert "application/json" in refused.value.extra["allowed"]


def _scored(client: TestClient) -> int:
    return len(client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"])


def test_each_format_renders_the_same_answer(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    patients = [{"id": "=HYPERLINK(1)" if k == 0 else f"p{k}", "features": p}
                for k, p in enumerate(random_patients(25, seed=3))]
    as_json = client.post("/v1/risk/batch", json={"patients": patients})
    assert as_json.status_code == 200 and as_json.headers["vary"] == "Accept"
    results = as_json.json()["results"]

    as_csv = client.post("/v1/risk/batch", json={"patients": patients},
                         headers={"Accept": "text/csv"})
    assert as_csv.status_code == 200, as_csv.text
    assert as_csv.headers["content-type"].startswith("text/csv")
    header, *rows = list(csv.reader(io.StringIO(as_csv.text)))
    features = list(PATIENT)
    assert header == ["id", "probability", "log_odds", "band",
                      *(f"contribution:{f}" for f in features), "imputed"]
    assert len(rows) == len(patients)
    assert rows[0][0] == "'=HYPERLINK(1)" and rows[1][0] == "p1"
    for row, result in zip(rows, results, strict=True):
        assert float(row[1]) == result["probability"] and row[3] == result["band"]
        phi = {c["feature"]: c["contribution"] for c in result["contributions"]}
        assert [float(x) for x in row[4:-1]] == [phi[f] for f in features]

    single = client.post("/v1/risk", json={"features": PATIENT}).json()
    fhir = client.post("/v1/risk", json={"features": PATIENT},
                       headers={"Accept": "application/fhir+json"})
    assert fhir.status_code == 200, fhir.text
    assert fhir.headers["content-type"].startswith("application/fhir+json")
    (prediction,) = fhir.json()["prediction"]
    assert fhir.json()["resourceType"] == "RiskAssessment"
    assert prediction["probabilityDecimal"] == rounded(single["probability"])


def test_a_format_not_offered_is_406_and_scores_nobody(client: TestClient,
                                                       run_worker: Any) -> None:
    train_models(client, run_worker)
    before = _scored(client)
    refused = client.post("/v1/risk", json={"features": PATIENT},
                          headers={"Accept": "application/xml"})
    body = problem(refused, 406, field="Accept")
    assert "text/csv" in body["allowed"] and "application/fhir+json" in body["allowed"]
    batch = client.post("/v1/risk/batch", json={"patients": [{"features": PATIENT}]},
                        headers={"Accept": "application/fhir+json"})
    assert "application/fhir+json" not in problem(batch, 406, field="Accept")["allowed"]
    assert _scored(client) == before


def test_openapi_names_the_media_types(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    single = paths["/v1/risk"]["post"]["responses"]
    batch = paths["/v1/risk/batch"]["post"]["responses"]
    assert {"application/json", "application/fhir+json", "text/csv"} <= set(
        single["200"]["content"])
    assert "text/csv" in batch["200"]["content"]
    assert "application/fhir+json" not in batch["200"]["content"]
    assert "406" in single and "406" in batch
