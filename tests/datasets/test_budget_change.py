"""PUT /v1/datasets/{id}/privacy-budget: a chained change, refused below what is spent."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import small_dataset
from tests.ledger.test_patient_budget import SCHEMA, _table

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

PROBLEM = "application/problem+json"


def _dataset(client: TestClient) -> int:
    response = client.post("/v1/datasets", json=small_dataset())
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _put(client: TestClient, dataset_id: int, body: Any) -> Any:
    return client.put(f"/v1/datasets/{dataset_id}/privacy-budget", json=body)


def _state(client: TestClient, dataset_id: int) -> tuple[Any, int, Any]:
    """Budget, chain length and composed spend: what a refused change must leave alone."""
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    verify = client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    assert verify["valid"]
    return report["budget"], verify["records"], report["spent"]["epsilon"]


def _submit(client: TestClient, dataset_id: int, sigma: float) -> Any:
    """A 3-epoch job on 1,400 training rows; sigma 0.8 costs RDP epsilon 9.39, 1.5 costs 3.07."""
    return client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "privacy": {"noise_multiplier": sigma},
              "training": {"epochs": 3, "batch_size": 256}},
    )


def test_raising_the_budget_admits_a_job_that_was_refused(any_client: TestClient) -> None:
    dataset_id = _dataset(any_client)  # budget epsilon 10
    assert _submit(any_client, dataset_id, 0.8).status_code == 202
    refused = _submit(any_client, dataset_id, 0.8)  # composed: 12.4
    assert refused.status_code == 409
    order = any_client.get(f"/v1/datasets/{dataset_id}").json()["privacy_budget"]["filter_order"]
    raised = _put(any_client, dataset_id, {"epsilon": 20.0, "delta": 1e-5})
    assert raised.status_code == 200, raised.text
    # The filter's order was fixed at registration: a new budget moves only its bound.
    assert raised.json()["privacy_budget"] == {"epsilon": 20.0, "delta": 1e-5,
                                               "filter_order": order}
    assert _submit(any_client, dataset_id, 0.8).status_code == 202
    report = any_client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    assert report["budget"]["epsilon"] == 20.0
    assert report["spent"]["epsilon"] < 20.0


def test_lowering_below_the_spend_is_409_and_changes_nothing(any_client: TestClient) -> None:
    dataset_id = _dataset(any_client)
    assert _submit(any_client, dataset_id, 1.5).status_code == 202
    before = _state(any_client, dataset_id)
    spent = before[2]

    response = _put(any_client, dataset_id, {"epsilon": 2.0, "delta": 1e-5})
    assert response.status_code == 409
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["type"].endswith("/budget-below-spend")
    assert body["spent_epsilon"] == pytest.approx(spent, rel=1e-9)
    assert body["errors"][0]["field"] == "epsilon"
    assert body["requested"] == {"epsilon": 2.0, "delta": 1e-5}
    assert _state(any_client, dataset_id) == before


def test_a_smaller_delta_raises_the_spend_it_is_checked_at(any_client: TestClient) -> None:
    """The spend is recomposed at the new delta: a budget just above it at 1e-5 may not be."""
    dataset_id = _dataset(any_client)
    assert _submit(any_client, dataset_id, 1.5).status_code == 202
    spent = _state(any_client, dataset_id)[2]
    epsilon = spent * 1.001
    assert _put(any_client, dataset_id, {"epsilon": epsilon, "delta": 1e-5}).status_code == 200
    tighter = _put(any_client, dataset_id, {"epsilon": epsilon, "delta": 1e-9})
    assert tighter.status_code == 409, tighter.text
    assert tighter.json()["spent_epsilon"] > epsilon


@pytest.mark.parametrize(
    ("body", "field", "allowed"),
    [
        ({"epsilon": 0, "delta": 1e-5}, "epsilon", "(0, 100]"),
        ({"epsilon": -1, "delta": 1e-5}, "epsilon", "(0, 100]"),
        ({"epsilon": 101, "delta": 1e-5}, "epsilon", "(0, 100]"),
        ({"epsilon": 5, "delta": 0}, "delta", "(0, 1)"),
        ({"epsilon": 5, "delta": 1e-4}, "delta", "(0, 5e-05]"),  # > 1/(10 n_rows), 2,000 rows
        ({"epsilon": 5}, "delta", None),
        ({"epsilon": "five", "delta": 1e-5}, "epsilon", "(0, 100]"),
        ({"epsilon": 5, "delta": 1e-5, "spent": 0}, "spent", None),
    ],
)
def test_bad_budgets_are_problem_json_and_change_nothing(
    any_client: TestClient, body: Any, field: str, allowed: str | None
) -> None:
    dataset_id = _dataset(any_client)
    before = _state(any_client, dataset_id)
    response = _put(any_client, dataset_id, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    error = response.json()["errors"][0]
    assert error["field"] == field
    if allowed is not None:
        assert error["allowed"] == allowed
    assert _state(any_client, dataset_id) == before


def test_unknown_dataset_is_404(any_client: TestClient) -> None:
    response = _put(any_client, 999_999, {"epsilon": 5, "delta": 1e-5})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM)


def test_a_registration_awaiting_its_rows_takes_a_budget_checked_when_they_arrive(
        client: TestClient) -> None:
    """No rows yet, no size to hold delta to: the change is kept (not a 500), and the upload
    then holds the delta to 1/(10 n) for its rows."""
    created = client.post("/v1/datasets", json={
        "name": "awaiting", "source": {"kind": "upload"}, "schema": SCHEMA,
        "privacy_budget": {"epsilon": 4, "delta": 1e-6}})
    assert created.status_code == 201, created.text
    dataset_id = created.json()["id"]
    changed = _put(client, dataset_id, {"epsilon": 5, "delta": 1e-3})
    assert changed.status_code == 200, changed.text
    assert changed.json()["privacy_budget"]["delta"] == 1e-3
    sent = client.put(f"/v1/datasets/{dataset_id}/data",
                      content=_table([f"p{i}" for i in range(400)]),
                      headers={"Content-Type": "text/csv", "Prefer": "wait=60"})
    assert sent.status_code == 422, sent.text
    assert "privacy_budget.delta" in sent.text, sent.text
