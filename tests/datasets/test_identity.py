"""Patient identity (keyed per-record coins) and data identity (one registration per source)."""

from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from app.datasets import identity
from tests.api.scoring_helpers import problem

SOURCE = {"kind": "synthetic", "n_rows": 2000, "seed": 77}


def test_removing_one_record_moves_no_other_record() -> None:
    secret = identity.new_secret()
    ids = list(range(5000))
    parts = identity.parts_of(ids, secret)
    for removed in (0, 1234, 4999):
        rest = [i for i in ids if i != removed]
        assert np.array_equal(identity.parts_of(rest, secret), np.delete(parts, removed))


def test_parts_follow_the_public_fractions_and_the_secret() -> None:
    secret = identity.new_secret()
    parts = identity.parts_of(range(100_000), secret)
    shares = np.bincount(parts, minlength=3) / 100_000
    assert np.allclose(shares, [0.7, 0.15, 0.15], atol=0.01)
    other = identity.parts_of(range(100_000), identity.new_secret())
    assert np.mean(parts != other) > 0.3  # another secret: another split
    assert np.array_equal(identity.parts_of(["a", "b"], secret),
                          identity.parts_of(["a", "b"], secret))


def _register(client: TestClient, **changes: Any) -> Any:
    body = {"name": "twin", "source": SOURCE, "privacy_budget": {"epsilon": 8, "delta": 1e-5}}
    return client.post("/v1/datasets", json={**body, **changes})


def test_a_source_registered_twice_is_refused_naming_the_first(client: TestClient) -> None:
    first = _register(client)
    assert first.status_code == 201, first.text
    second = _register(client, name="again")
    body = problem(second, 409, field="source")
    assert body["existing_dataset_id"] == first.json()["id"]
    assert f"dataset {first.json()['id']}" in body["detail"]


def test_a_public_twin_of_a_private_source_is_refused(client: TestClient) -> None:
    assert _register(client).status_code == 201
    twin = _register(client, public=True, privacy_budget=None)
    problem(twin, 409, field="source")


def test_delta_is_capped_at_a_tenth_of_one_over_n(client: TestClient) -> None:
    too_large = _register(client, privacy_budget={"epsilon": 8, "delta": 1 / (5 * 2000)})
    body = problem(too_large, 422, field="privacy_budget.delta")
    assert "1/(10 n_rows)" in body["detail"]
    assert _register(client, privacy_budget={"epsilon": 8, "delta": 1 / (10 * 2000)}
                     ).status_code == 201


def test_only_admins_and_data_scientists_see_the_seed(client: TestClient, client_as) -> None:
    created = _register(client)
    dataset_id = created.json()["id"]
    assert created.json()["source"]["seed"] == SOURCE["seed"]
    scientist = client_as("data_scientist").get(f"/v1/datasets/{dataset_id}").json()
    officer = client_as("privacy_officer").get(f"/v1/datasets/{dataset_id}").json()
    assert scientist["source"]["seed"] == SOURCE["seed"]
    assert officer["source"]["seed"] is None
    page = client_as("privacy_officer").get(f"/v1/datasets/{dataset_id}/privacy-report").text
    assert str(SOURCE["seed"]) not in page.replace(str(dataset_id), "")


def test_the_record_secret_is_never_served(client: TestClient) -> None:
    created = _register(client).json()
    assert "secret" not in str(created).lower()
    parts = created["training_rows"] + created["calibration_rows"] + created["evaluation_rows"]
    assert parts == created["rows"] == SOURCE["n_rows"]
