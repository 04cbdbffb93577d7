"""Bad input: a clear 4xx naming the field, and nothing charged (no ledger record, no release)."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import small_dataset
from tests.statistics.helpers import AGE_BANDS, ask, fields_of

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

GAF_EDGES = list(range(1, 102))  # 100 bins
AGE_EDGES = list(range(18, 82))  # 63 bins


def _body(*queries: dict[str, Any], **privacy: Any) -> dict[str, Any]:
    return {"queries": list(queries), "privacy": privacy or {"epsilon": 0.5}}


CASES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown feature", _body({"kind": "mean", "feature": "height"}), "queries[0].feature"),
    ("unknown grouping", _body({"kind": "count", "by": ["ethnicity"]}), "queries[0].by[0]"),
    ("numeric grouping without bins", _body({"kind": "count", "by": ["age"]}),
     "queries[0].by[0]"),
    ("grouping bins outside the bounds",
     _body({"kind": "count", "by": [{"feature": "age", "bins": [10, 30, 81]}]}),
     "queries[0].by[0].bins"),
    ("grouping bins not increasing",
     _body({"kind": "count", "by": [{"feature": "age", "bins": [18, 45, 30]}]}),
     "queries[0].by[0].bins"),
    ("histogram bins outside the bounds",
     _body({"kind": "histogram", "feature": "phq9", "bins": [0, 10, 29]}), "queries[0].bins"),
    ("histogram bins not increasing",
     _body({"kind": "histogram", "feature": "phq9", "bins": [0, 10, 10, 27]}),
     "queries[0].bins"),
    ("numeric histogram without bins", _body({"kind": "histogram", "feature": "gaf"}),
     "queries[0].bins"),
    ("bins on a category", _body({"kind": "count", "by": [{"feature": "sex", "bins": [0, 1]}]}),
     "queries[0].by[0].bins"),
    ("a mean of a category", _body({"kind": "mean", "feature": "sex"}), "queries[0].feature"),
    ("a count with a feature", _body({"kind": "count", "feature": "age"}),
     "queries[0].feature"),
    ("a mean without a feature", _body({"kind": "mean"}), "queries[0].feature"),
    ("grouped twice by one column", _body({"kind": "count", "by": ["sex", "sex"]}),
     "queries[0].by[1]"),
    ("an unknown kind", _body({"kind": "median", "feature": "age"}), "queries[0].kind"),
    ("more than 50 queries", _body(*[{"kind": "count"}] * 51), "queries"),
    ("no query", _body(), "queries"),
    ("more than 10,000 cells in a query",
     _body({"kind": "histogram", "feature": "gaf", "bins": GAF_EDGES,
            "by": ["sex", {"feature": "age", "bins": AGE_EDGES}]}), "queries[0].by"),
    ("more than 10,000 cells in all",
     _body(*[{"kind": "histogram", "feature": "gaf", "bins": GAF_EDGES,
              "by": [{"feature": "age", "bins": AGE_EDGES}]}] * 2), "queries"),
    ("epsilon zero", _body({"kind": "count"}, epsilon=0), "privacy.epsilon"),
    ("epsilon negative", _body({"kind": "count"}, epsilon=-1), "privacy.epsilon"),
    ("epsilon too large", _body({"kind": "count"}, epsilon=1000), "privacy.epsilon"),
    ("epsilon missing", _body({"kind": "count"}, delta=1e-6), "privacy.epsilon"),
    ("delta above 1/(10 n)", _body({"kind": "count"}, epsilon=1, delta=0.01), "privacy.delta"),
    ("delta with Laplace", _body({"kind": "count"}, epsilon=1, delta=1e-6,
                                 mechanism="laplace"), "privacy.delta"),
    ("an unknown mechanism", _body({"kind": "count"}, epsilon=1, mechanism="exponential"),
     "privacy.mechanism"),
    ("a weight of zero", _body({"kind": "count", "weight": 0}), "queries[0].weight"),
    ("an unknown field", _body({"kind": "count", "where": "age > 30"}), "queries[0].where"),
]


@pytest.fixture
def dataset_id(client: TestClient) -> int:
    return int(client.post("/v1/datasets", json=small_dataset()).json()["id"])


def _nothing_charged(client: TestClient, dataset_id: int) -> None:
    ledger = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    assert ledger["entries"] == [] and ledger["statistics_releases"] == []
    assert client.get(f"/v1/datasets/{dataset_id}/statistics").json()["total"] == 0
    assert client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()["records"] == 1


@pytest.mark.parametrize(("case", "body", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field_and_charges_nothing(
    client: TestClient, dataset_id: int, case: str, body: dict[str, Any], field: str
) -> None:
    response = ask(client, dataset_id, body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert field in fields_of(problem), (case, problem)
    _nothing_charged(client, dataset_id)


def test_an_unknown_dataset_is_a_404(client: TestClient) -> None:
    response = ask(client, 999, _body({"kind": "count"}))
    assert response.status_code == 404 and "dataset_id" in fields_of(response.json())


def test_a_dataset_without_data_is_a_409_naming_it(client: TestClient) -> None:
    schema = {"features": [{"name": "phq9", "kind": "integer", "lower": 0, "upper": 27,
                            "reference": 5}],
              "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days",
                          "bands": {"low_medium": 0.05, "medium_high": 0.2}},
              "id_column": "patient_id"}
    created = client.post("/v1/datasets", json={
        "name": "clinic", "source": {"kind": "upload"}, "schema": schema,
        "privacy_budget": {"epsilon": 3, "delta": 1e-6}}).json()
    assert created["state"] == "awaiting_data"
    response = ask(client, created["id"], _body({"kind": "count"}))
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["state"] == "awaiting_data" and fields_of(problem) == ["dataset_id"]
    assert "PUT /v1/datasets/{id}/data" in problem["detail"]
    _nothing_charged(client, created["id"])


def test_bins_may_end_one_past_an_integer_bound(client: TestClient, dataset_id: int) -> None:
    body = _body({"kind": "count", "by": [{"feature": "age", "bins": AGE_BANDS}]},
                 {"kind": "count", "by": [{"feature": "age", "bins": [18, 80]}]})
    first, second = ask(client, dataset_id, body).json()["answers"]
    assert first["cells"][-1]["group"] == {"age": "65-80"}
    assert second["cells"][0]["group"] == {"age": "18-80"}  # the last bin is closed
