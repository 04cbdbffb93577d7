"""The Rényi filter at one fixed order: its order, the first-release rule, the 409's largest
target, and admission under the filter compared with the exact PLD ceiling."""

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants.analysis.rdp import compute_rdp

from app.privacy import accounting
from app.privacy.accounting import Mechanism
from app.privacy.filter import RenyiFilter, conversion, filter_order, rdp_at


def _dataset(client: TestClient, epsilon: float, seed: int, n_rows: int = 2000) -> dict[str, Any]:
    response = client.post("/v1/datasets", json={
        "name": "filter", "source": {"kind": "synthetic", "n_rows": n_rows, "seed": seed},
        "privacy_budget": {"epsilon": epsilon, "delta": 1e-5}})
    assert response.status_code == 201, response.text
    return response.json()


def _job(client: TestClient, dataset_id: int, target: float) -> Any:
    return client.post("/v1/jobs", json={
        "dataset_id": dataset_id, "privacy": {"target_epsilon": target},
        "training": {"epochs": 3, "batch_size": 256}})


def test_order_is_a_public_function_of_the_budget() -> None:
    assert filter_order(8.0, 1e-5) == pytest.approx(3.9)
    assert filter_order(1.0, 1e-5) > filter_order(8.0, 1e-5)  # small budgets: higher orders
    assert filter_order(8.0, 1e-5) in accounting.RDP_ORDERS


def test_the_bound_converts_back_to_the_budget() -> None:
    guard = RenyiFilter(8.0, 1e-5, filter_order(8.0, 1e-5))
    assert guard.epsilon_of(guard.rdp_bound) == pytest.approx(8.0)
    assert guard.admits(guard.rdp_bound / 2, guard.rdp_bound / 2)
    assert not guard.admits(guard.rdp_bound / 2, guard.rdp_bound / 2 + 1e-9)


def test_rdp_at_matches_opacus() -> None:
    m = Mechanism(1.3, 0.02, 500)
    expected = compute_rdp(q=0.02, noise_multiplier=1.3, steps=500, orders=[3.9])[0]
    assert rdp_at([m], 3.9) == pytest.approx(expected)
    with pytest.raises(ValueError, match="grid"):
        rdp_at([m], 3.95)


jobs = st.lists(st.tuples(st.floats(0.6, 5.0), st.floats(0.005, 0.5), st.integers(1, 400)),
                min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(budget=st.floats(0.3, 20.0), sequence=jobs)
def test_whatever_the_filter_admits_composes_within_budget(
    budget: float, sequence: list[tuple[float, float, int]]
) -> None:
    """Feed the filter random jobs in order; what it admits, at its own order, is within budget."""
    guard = RenyiFilter(budget, 1e-5, filter_order(budget, 1e-5))
    spent = 0.0
    for sigma, q, steps in sequence:
        cost = rdp_at([Mechanism(sigma, q, steps)], guard.order)
        if guard.admits(spent, cost):
            spent += cost
    independent = spent + (math.log((guard.order - 1) / guard.order)
                           - (math.log(1e-5) + math.log(guard.order)) / (guard.order - 1))
    assert spent == 0.0 or independent <= budget + 1e-9


def test_a_first_job_whose_target_is_the_budget_is_admitted(client: TestClient) -> None:
    dataset = _dataset(client, epsilon=1.0, seed=501)
    response = _job(client, dataset["id"], target=1.0)
    assert response.status_code == 202, response.text
    assert response.json()["privacy"]["epsilon_planned"]["pld"] <= 1.0
    refused = _job(client, dataset["id"], target=0.5)  # nothing is left after the whole budget
    assert refused.status_code == 409, refused.text


def test_a_refusal_names_the_largest_target_that_fits_and_that_target_fits(
    client: TestClient,
) -> None:
    dataset = _dataset(client, epsilon=2.5, seed=502)
    assert _job(client, dataset["id"], target=2.0).status_code == 202
    refused = _job(client, dataset["id"], target=2.0)
    assert refused.status_code == 409, refused.text
    body = refused.json()
    largest = body["largest_fitting_target_epsilon"]
    assert 0 < largest < 2.0, body
    assert f"{largest:g}" in body["detail"]
    assert body["filter"]["order"] == dataset["privacy_budget"]["filter_order"]
    assert _job(client, dataset["id"], target=largest).status_code == 202


def test_conversion_matches_balle_et_al() -> None:
    order, delta = 3.9, 1e-5
    assert conversion(order, delta) == pytest.approx(
        math.log1p(-1 / order) - (math.log(delta) + math.log(order)) / (order - 1))
