"""A family registered in-process is picked up end to end with no edit elsewhere: the job
request accepts its name, the recipe takes its learning rate, the worker trains it (the
engine's ``torch.func`` rule: no closed form given), the artifact names it, and scoring loads
and explains it. This is the promise of docs/families.md, checked."""

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from torch import nn

from app.core.database import Database
from app.families import Family, create_family, register_family, unregister_family
from app.jobs import recipe
from app.jobs.schemas import TrainingConfig
from app.registry import artifacts
from app.registry.models import TrainedModel
from tests.api.scoring_helpers import QUICK_JOB
from tests.conftest import PATIENT, small_dataset


class TwoLayer(Family):
    """Two tanh hidden layers: the docs' worked example, a torch family in one class."""

    name = "toy_two_layer"
    learning_rates = {"adam": 0.05, "sgd": 0.4}

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        return nn.Sequential(
            nn.Linear(n_inputs, hidden_units), nn.Tanh(),
            nn.Linear(hidden_units, hidden_units), nn.Tanh(), nn.Linear(hidden_units, 1),
        )


@pytest.fixture
def toy() -> Iterator[Family]:
    family = register_family(TwoLayer())
    try:
        yield family
    finally:
        unregister_family(family.name)


def test_validation_and_recipe_pick_it_up(toy: Family) -> None:
    assert TrainingConfig.model_validate({"model": toy.name}).model == toy.name
    assert recipe.default_learning_rate("adam", toy.name) == 0.05
    enum = TrainingConfig.model_json_schema()["properties"]["model"]["enum"]
    assert enum == ["logistic", "mlp", "dp_ebm", toy.name]


def test_unregistered_name_is_refused_like_a_literal() -> None:
    with pytest.raises(ValueError, match="Input should be 'logistic', 'mlp' or 'dp_ebm'"):
        TrainingConfig.model_validate({"model": "toy_two_layer"})


def test_trained_stored_and_scored(toy: Family, client: TestClient, run_worker: Any,
                                   db: Database) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    body = {**QUICK_JOB, "training": {**QUICK_JOB["training"], "model": toy.name,
                                      "hidden_units": 4}}
    submitted = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **body})
    assert submitted.status_code == 202, submitted.text
    assert submitted.json()["training"]["learning_rate"] == 0.05
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{submitted.json()['id']}").json()
    assert job["status"] == "succeeded", job

    with db.session_scope() as session:
        model = session.get(TrainedModel, int(job["model_id"]))
        assert model is not None and model.kind == toy.name
        network, config = artifacts.load(model.artifact_sha256)
    assert config["family"] == toy.name and len(list(network.children())) == 5

    scored = client.post("/v1/risk", json={"features": PATIENT, "model_id": job["model_id"]})
    assert scored.status_code == 200, scored.text
    assert scored.json()["model"]["kind"] == toy.name
    assert 0.0 < scored.json()["probability"] < 1.0
    assert create_family(toy.name) is toy
