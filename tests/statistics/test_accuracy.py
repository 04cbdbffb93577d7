"""The stated standard errors are the errors: an independent client regenerates a synthetic
dataset from its seed (an admin may read it), computes the exact answers, and compares them with
many releases. Over repeated releases the errors divided by the stated standard errors have
mean square about 1 and the 95% intervals cover about 95% of the exact values."""

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.datasets import synthetic
from tests.conftest import small_dataset
from tests.statistics.helpers import AGE_BANDS, ask

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

N_ROWS = 4000
QUERIES = [
    {"kind": "count", "by": ["sex", {"feature": "age", "bins": AGE_BANDS}]},
    {"kind": "mean", "feature": "num_sessions", "by": ["sex"]},
    {"kind": "mean", "feature": "phq9"},
    {"kind": "prevalence"},
]


def _exact(client: TestClient, dataset_id: int) -> list[np.ndarray]:
    """The exact answers, computed by the client from the regenerated rows."""
    source = client.get(f"/v1/datasets/{dataset_id}").json()["source"]
    table = synthetic.generate(source["n_rows"], source["seed"])
    age, phq9, sessions = table.x[:, 0], table.x[:, 1], table.x[:, 3]
    band = np.searchsorted(np.array(AGE_BANDS[1:-1]), age, side="right")
    counts = np.bincount(table.sex * 4 + band, minlength=8).astype(float)
    means = np.array([sessions[table.sex == s].mean() for s in (0, 1)])
    return [counts, means, np.array([phq9.mean()]), np.array([table.y.mean()])]


def _errors(client: TestClient, dataset_id: int, queries: list[dict[str, Any]],
            privacy: dict[str, Any], releases: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(error / stated standard error, exact value inside the 95% interval) per query."""
    exact = _exact(client, dataset_id)
    z: list[list[float]] = [[] for _ in queries]
    covered: list[list[bool]] = [[] for _ in queries]
    for _ in range(releases):
        response = ask(client, dataset_id, {"queries": queries, "privacy": privacy})
        assert response.status_code == 201, response.text
        for i, answer in enumerate(response.json()["answers"]):
            for cell, truth in zip(answer["cells"], exact[i], strict=True):
                z[i].append((cell["value"] - truth) / cell["standard_error"])
                low, high = cell["ci95"]
                covered[i].append(low <= truth <= high)
    return [(np.array(a), np.array(b)) for a, b in zip(z, covered, strict=True)]


@pytest.fixture
def dataset_id(client: TestClient) -> int:
    body = small_dataset(privacy_budget={"epsilon": 100.0, "delta": 1e-6})
    body["source"]["n_rows"] = N_ROWS
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_gaussian_errors_match_the_stated_standard_errors(
    client: TestClient, dataset_id: int
) -> None:
    counts, sessions, phq9, prevalence = _errors(client, dataset_id, QUERIES, {"epsilon": 0.3},
                                                 60)
    # 480 count cells: exact Gaussian noise, so z is N(0, 1) (4 standard deviations of slack).
    assert 0.75 < float(np.mean(counts[0] ** 2)) < 1.3
    assert abs(float(np.mean(counts[0]))) < 0.2
    assert 0.92 < float(np.mean(counts[1])) <= 1.0
    # Ratios: the delta method at the noisy values (groups of about 2,000 and 4,000 rows).
    for z, covered in (sessions, phq9, prevalence):
        assert 0.45 < float(np.mean(z**2)) < 1.7  # 60 to 120 cells each: wide
        assert float(np.mean(covered)) > 0.85


def test_laplace_errors_match_the_stated_standard_errors(
    client: TestClient, dataset_id: int
) -> None:
    ((z, covered),) = _errors(client, dataset_id, QUERIES[:1],
                              {"epsilon": 0.5, "mechanism": "laplace"}, 50)
    assert 0.6 < float(np.mean(z**2)) < 1.5  # Laplace: variance 2 b^2, heavier tails
    assert 0.92 < float(np.mean(covered)) <= 1.0
