"""Numbers are numbers: an epsilon, a delta or a noise multiplier sent as a string that reads
as a number ("1") is a 422 naming the field, on every route that takes one; an integer is
still a number."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import small_dataset

STRING_ONE: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/v1/datasets",
     small_dataset(privacy_budget={"epsilon": "1", "delta": 1e-5}), "privacy_budget.epsilon"),
    ("POST", "/v1/datasets",
     small_dataset(privacy_budget={"epsilon": 1, "delta": "0.00001"}), "privacy_budget.delta"),
    ("PUT", "/v1/datasets/1/privacy-budget", {"epsilon": "1", "delta": 1e-5}, "epsilon"),
    ("PUT", "/v1/patient-budget", {"epsilon": 1, "delta": "1e-6"}, "delta"),
    ("POST", "/v1/jobs", {"dataset_id": 1, "privacy": {"target_epsilon": "1"}},
     "privacy.target_epsilon"),
    ("POST", "/v1/jobs", {"dataset_id": 1, "privacy": {"noise_multiplier": "1"}},
     "privacy.noise_multiplier"),
    ("POST", "/v1/jobs", {"dataset_id": 1, "privacy": {"target_epsilon": 1, "delta": "1e-6"}},
     "privacy.delta"),
    ("POST", "/v1/datasets/1/statistics",
     {"queries": [{"kind": "count"}], "privacy": {"epsilon": "1"}}, "privacy.epsilon"),
    ("POST", "/v1/models/1/monitoring-runs",
     {"dataset_id": 1, "privacy": {"target_epsilon": "1"}}, "privacy.target_epsilon"),
    ("POST", "/v1/models/1/comparisons",
     {"challenger_id": 2, "dataset_id": 1, "privacy": {"target_epsilon": "1"}},
     "privacy.target_epsilon"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), STRING_ONE,
                         ids=[f"{m} {p} {f}" for m, p, _, f in STRING_ONE])
def test_a_privacy_number_sent_as_a_string_is_refused(
    client: TestClient, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    fields = [error["field"] for error in response.json()["errors"]]
    assert field in fields, fields


def test_integers_are_still_numbers(client: TestClient) -> None:
    made = client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": 10, "delta": 1e-5}))
    assert made.status_code == 201, made.text
    job = client.post("/v1/jobs", json={"dataset_id": made.json()["id"],
                                        "privacy": {"target_epsilon": 1}})
    assert job.status_code == 202, job.text
    assert job.json()["privacy"]["target_epsilon"] == 1.0
