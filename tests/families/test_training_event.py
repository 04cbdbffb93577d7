"""A family's ``training_event`` is what the ledger reserves and what the planned figures
compose: a family that spends otherwise changes no branch in jobs or the ledger."""

from collections.abc import Iterator

import pytest
from dp_accounting import DpEvent
from fastapi.testclient import TestClient
from sqlalchemy import select
from torch import nn

from app.core.database import Database
from app.families import Family, register_family, unregister_family
from app.ledger.models import LedgerEntry
from app.privacy import events
from tests.api.scoring_helpers import QUICK_JOB
from tests.conftest import small_dataset


class NoAmplification(Family):
    """A logistic network whose training claims no privacy amplification by sampling: its
    event charges every step as if every record were in it (sample rate 1)."""

    name = "toy_no_amplification"
    learning_rates = {"adam": 0.05, "sgd": 0.4}

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        return nn.Linear(n_inputs, 1)

    def training_event(self, *, noise_multiplier: float, sample_rate: float,
                       steps: int) -> DpEvent:
        return events.dpsgd(noise_multiplier, 1.0, steps)


@pytest.fixture
def no_amplification() -> Iterator[Family]:
    family = register_family(NoAmplification())
    try:
        yield family
    finally:
        unregister_family(family.name)


def _submit(client: TestClient, model: str) -> dict[str, object]:
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    body = {**QUICK_JOB, "training": {**QUICK_JOB["training"], "model": model}}
    submitted = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **body})
    assert submitted.status_code == 202, submitted.text
    return dict(submitted.json())


def test_the_ledger_reserves_the_familys_event(no_amplification: Family, client: TestClient,
                                                db: Database) -> None:
    toy = _submit(client, no_amplification.name)
    plain = _submit(client, "logistic")
    with db.session_scope() as session:
        entries = {e.job_id: e for e in session.scalars(select(LedgerEntry))}
        toy_entry, plain_entry = entries[toy["id"]], entries[plain["id"]]
        assert toy_entry.sample_rate == 1.0 and plain_entry.sample_rate < 1.0
        stored = events.from_json(toy_entry.event)
        assert events.describe(stored).sample_rate == 1.0
    planned_toy, planned_plain = (
        client.get(f"/v1/jobs/{job['id']}").json()["privacy"]["epsilon_planned"]["pld"]
        for job in (toy, plain))
    assert planned_toy > planned_plain  # no amplification: the same steps cost more
