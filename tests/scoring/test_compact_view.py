"""POST /v1/risk/batch?view=compact: the same answer, cut to what a results table shows.

A clinic's 4,038-patient CSV came back as 8 MB of JSON; the compact view keeps each patient's
probability, band and top contributions (and the model's statement once).
"""

from typing import Any

from fastapi.testclient import TestClient

from app.main import create_app
from app.scoring.schemas import TOP_CONTRIBUTIONS, RiskBatchCompact
from tests.api.scoring_helpers import problem, train_models
from tests.scoring.test_risk_batch import random_patients

LARGE = 4_000


def test_compact_view_is_a_fraction_of_the_full_answer(client: TestClient,
                                                       run_worker: Any) -> None:
    train_models(client, run_worker)
    body = {"patients": [{"id": f"p{k}", "features": p}
                         for k, p in enumerate(random_patients(LARGE, seed=9))]}
    full = client.post("/v1/risk/batch", json=body)
    compact = client.post("/v1/risk/batch", params={"view": "compact"}, json=body)
    assert full.status_code == 200 and compact.status_code == 200, compact.text
    assert client.post("/v1/risk/batch", params={"view": "full"}, json=body).content == \
        full.content
    print(f"\n{LARGE:,} patients: full {len(full.content):,} bytes, "
          f"compact {len(compact.content):,} bytes")
    assert len(compact.content) < len(full.content) / 3

    answer = RiskBatchCompact.model_validate(compact.json())  # the documented shape
    results = full.json()["results"]
    assert answer.model.model_dump() == full.json()["model"]
    for mine, theirs in zip(answer.results, results, strict=True):
        assert (mine.id, mine.probability, mine.band) == (
            theirs["id"], theirs["probability"], theirs["band"])
        assert [c.feature for c in mine.contributions] == [
            c["feature"] for c in theirs["contributions"][:TOP_CONTRIBUTIONS]]


def test_unknown_view_is_refused(client: TestClient) -> None:
    body = {"patients": [{"features": random_patients(1)[0]}]}
    problem(client.post("/v1/risk/batch", params={"view": "tiny"}, json=body), 422,
            field="view")


def test_openapi_documents_both_views() -> None:
    document = create_app().openapi()
    operation = document["paths"]["/v1/risk/batch"]["post"]
    (view,) = [p for p in operation["parameters"] if p["name"] == "view"]
    assert view["in"] == "query" and not view.get("required")
    schema = view["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    assert schema["enum"] == ["full", "compact"]
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    named = {branch["$ref"].rsplit("/", 1)[-1] for branch in ok["anyOf"]}
    assert named == {"RiskBatchResponse", "RiskBatchCompact"}
