"""Statistics on an uploaded table: group keys come from the declared schema (a category nobody
has is still answered), values from the stored Parquet table, exact where the client can check
the counts it uploaded."""

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.datasets.test_dataset_schema import CONTRACT
from tests.statistics.helpers import ask

N_ROWS = 3000


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _uploaded(client: TestClient) -> tuple[int, np.ndarray, np.ndarray]:
    """An upload with phq9, sex (female or male only, never 'other'), prior_crisis, outcome."""
    rng = np.random.default_rng(5)
    phq9, male = rng.integers(0, 28, N_ROWS), rng.integers(0, 2, N_ROWS)
    rows = [f"p{i},{phq9[i]},{'male' if male[i] else 'female'},{rng.integers(0, 2)},"
            f"{int(rng.random() < 0.2)}" for i in range(N_ROWS)]
    created = client.post("/v1/datasets", json={
        "name": "clinic", "source": {"kind": "upload"}, "schema": CONTRACT,
        "privacy_budget": {"epsilon": 5, "delta": 1e-6}}).json()
    body = "\n".join(["patient_id,phq9,sex,prior_crisis,crisis_30d", *rows]) + "\n"
    sent = client.put(f"/v1/datasets/{created['id']}/data", content=body.encode(),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text
    return created["id"], phq9, male


def test_groups_come_from_the_schema_and_values_from_the_table(client: TestClient) -> None:
    dataset_id, phq9, male = _uploaded(client)
    body = {"queries": [{"kind": "count", "by": ["sex"]},
                        {"kind": "mean", "feature": "phq9", "by": ["sex"]},
                        {"kind": "histogram", "feature": "prior_crisis"}],
            "privacy": {"epsilon": 4.0}}
    response = ask(client, dataset_id, body)
    assert response.status_code == 201, response.text
    counts, means, histogram = response.json()["answers"]
    assert [c["group"]["sex"] for c in counts["cells"]] == ["female", "male", "other"]
    exact = [np.sum(male == 0), np.sum(male == 1), 0]
    for cell, truth in zip(counts["cells"], exact, strict=True):
        assert abs(cell["value"] - truth) < 6 * cell["standard_error"]
    other = means["cells"][2]  # nobody: answered, with an interval over most of the range
    assert other["group"] == {"sex": "other"} and 0 <= other["value"] <= 27
    assert other["ci95"][1] - other["ci95"][0] > 10
    female = means["cells"][0]
    assert abs(female["value"] - phq9[male == 0].mean()) < 6 * female["standard_error"]
    assert [c["bin"] for c in histogram["cells"]] == ["0", "1"]
