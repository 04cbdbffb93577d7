"""Register an upload with a declared schema, send its rows, train a quick model on it and make
it active: what every test of a clinic's own outcome starts from."""

from dataclasses import dataclass
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import FAST_TRAINING

PARQUET = "application/vnd.apache.parquet"


@dataclass(frozen=True)
class Trained:
    dataset_id: int
    job_id: int
    model_id: int


def train_declared(client: TestClient, run_worker: Any, *, name: str, schema: dict[str, Any],
                   table: bytes) -> Trained:
    """``table``: the rows as Parquet. Trains a logistic model at epsilon 3 and activates it."""
    created = client.post("/v1/datasets", json={
        "name": name, "source": {"kind": "upload"}, "schema": schema,
        "privacy_budget": {"epsilon": 8, "delta": 1e-5}})
    assert created.status_code == 201, created.text
    dataset_id = created.json()["id"]
    uploaded = client.put(f"/v1/datasets/{dataset_id}/data", content=table,
                          headers={"Content-Type": PARQUET})
    assert uploaded.status_code == 200, uploaded.text
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                        "privacy": {"target_epsilon": 3},
                                        "training": {**FAST_TRAINING, "model": "logistic"}})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    assert done["status"] == "succeeded", done
    activated = client.post(f"/v1/models/{done['model_id']}/activate")
    assert activated.status_code == 200, activated.text
    return Trained(dataset_id, int(done["id"]), int(done["model_id"]))
