"""Each entry's dp-accounting event is what is accounted, is hashed with its reserve record
(scheme 2), and must agree with the columns the reports read (SQLite and PostgreSQL)."""

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.core.database import Database
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry, LedgerEvent
from app.privacy import events
from tests.conftest import FAST_TRAINING, small_dataset
from tests.statistics.helpers import EXAMPLE, ask


def _dataset(client: TestClient) -> int:
    return int(client.post("/v1/datasets", json=small_dataset()).json()["id"])


def _submit(client: TestClient, dataset_id: int) -> int:
    response = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                             "privacy": {"noise_multiplier": 2.0},
                                             "training": FAST_TRAINING})
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


def _verify(client: TestClient, dataset_id: int) -> dict[str, Any]:
    return client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()


def test_a_quieter_event_behind_the_ledgers_back_breaks_the_chain_at_its_reserve(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    job_id = _submit(any_client, dataset_id)
    with any_db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None
        quieter = dict(entry.event, count=1)  # charge one step instead of the plan
        reserve = session.scalar(select(LedgerEvent.id).where(
            LedgerEvent.entry_id == entry.id, LedgerEvent.kind == "reserve"))
    with any_db.engine.begin() as conn:
        conn.execute(LedgerEntry.__table__.update().where(LedgerEntry.__table__.c.job_id == job_id)
                     .values(event=quieter))
    result = _verify(any_client, dataset_id)
    assert result["valid"] is False and result["first_invalid"]["id"] == reserve
    assert "hash" in result["first_invalid"]["reason"]


def test_a_record_put_back_under_the_old_scheme_breaks_the_chain(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    with any_db.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_event SET scheme = 1 WHERE dataset_id = :d AND "
                          "kind = 'reserve'"), {"d": dataset_id})
    result = _verify(any_client, dataset_id)
    assert result["valid"] is False and result["first_invalid"]["seq"] == 2
    assert "scheme-1 record after scheme-2" in result["first_invalid"]["reason"]


def test_a_statistics_release_is_recorded_as_its_vectors_events(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    for mechanism in ("gaussian", "laplace"):
        answer = ask(any_client, dataset_id,
                     {**EXAMPLE, "privacy": {"epsilon": 0.3, "mechanism": mechanism}})
        assert answer.status_code == 201, answer.text
    with any_db.session_scope() as session:
        entries = session.scalars(select(LedgerEntry).where(
            LedgerEntry.dataset_id == dataset_id).order_by(LedgerEntry.id)).all()
        for entry, mechanism in zip(entries, ("gaussian", "laplace"), strict=True):
            assert entry.mechanism == mechanism and entry.components
            assert events.from_json(entry.event) == events.one_shot(mechanism,
                                                                    entry.components)
    assert _verify(any_client, dataset_id)["valid"] is True


def test_columns_that_contradict_the_event_are_refused() -> None:
    entry = LedgerEntry(
        id=1, dataset_id=1, job_id=1, mechanism="poisson_subsampled_gaussian",
        noise_multiplier=1.1, sample_rate=0.01, steps=1000, clip_norm=1.0, delta=1e-5,
        accountant="rdp", event=events.to_json(events.dpsgd(5.0, 0.01, 1000)))
    with pytest.raises(ledger_spend.LedgerIntegrityError, match="contradict its event"):
        ledger_spend.entry_rdp_at(entry, 11.0)
    entry = LedgerEntry(
        id=2, dataset_id=1, job_id=2, mechanism="poisson_subsampled_gaussian",
        noise_multiplier=1.1, sample_rate=0.01, steps=1000, clip_norm=1.0, delta=1e-5,
        accountant="rdp", event={"type": "os.system", "command": "true"})
    with pytest.raises(ledger_spend.LedgerIntegrityError, match="unknown DpEvent type"):
        ledger_spend.entry_rdp_at(entry, 11.0)
