"""The ledger is append-only and hash-chained per dataset; verify names the first broken record.

Runs on SQLite and PostgreSQL: timestamps come back naive from one and offset from the other,
and the chain must verify on both.
"""

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from app.core.database import Database
from app.ledger.models import AppendOnlyViolation, LedgerEntry, LedgerEvent
from tests.conftest import FAST_TRAINING, SMALL_DATASET, small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

GENESIS = "0" * 64


def _dataset(client: TestClient) -> int:
    response = client.post("/v1/datasets", json=small_dataset())
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _submit(client: TestClient, dataset_id: int) -> int:
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "privacy": {"noise_multiplier": 2.0},
              "training": FAST_TRAINING},
    )
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _verify(client: TestClient, dataset_id: int) -> dict[str, Any]:
    response = client.get(f"/v1/datasets/{dataset_id}/ledger/verify")
    assert response.status_code == 200, response.text
    return response.json()


def _events(db: Database, dataset_id: int) -> list[LedgerEvent]:
    with db.session_scope() as session:
        rows = session.scalars(
            select(LedgerEvent).where(LedgerEvent.dataset_id == dataset_id)
            .order_by(LedgerEvent.seq)
        ).all()
        session.expunge_all()
        return list(rows)


def _raw(db: Database, sql: str, **params: Any) -> None:
    with db.engine.begin() as conn:
        assert conn.execute(text(sql), params).rowcount == 1


def _statuses(client: TestClient, dataset_id: int) -> list[str]:
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    return [e["status"] for e in report["entries"]]


def test_chain_is_valid_after_reserve_and_commit(
    any_client: TestClient, any_db: Database, run_worker: Any
) -> None:
    dataset_id = _dataset(any_client)
    fresh = _verify(any_client, dataset_id)
    (budget,) = _events(any_db, dataset_id)
    assert fresh == {"dataset_id": dataset_id, "valid": True, "budget_anchored": True,
                     "records": 1, "first_invalid": None, "head_hash": budget.hash}
    assert budget.kind == "budget" and budget.entry_id is None and budget.prev_hash == GENESIS
    assert (budget.budget_epsilon, budget.budget_delta) == (
        SMALL_DATASET["privacy_budget"]["epsilon"], SMALL_DATASET["privacy_budget"]["delta"]
    )
    _submit(any_client, dataset_id)
    assert _verify(any_client, dataset_id)["records"] == 2
    assert run_worker() == 1

    result = _verify(any_client, dataset_id)
    events = _events(any_db, dataset_id)
    assert result["valid"] and result["first_invalid"] is None
    assert result["records"] == 5 and result["head_hash"] == events[-1].hash
    # One commit per epoch, cumulative: the charge grows as training goes.
    assert [e.kind for e in events] == ["budget", "reserve", "commit", "commit", "commit"]
    steps = [e.steps for e in events[2:]]
    assert steps == sorted(steps) and steps[0] > 0 and len(set(steps)) == 3
    with any_db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id))
        assert entry is not None and steps[-1] == entry.steps == entry.committed_steps
    assert all(b.prev_hash == a.hash for a, b in zip(events, events[1:], strict=False))
    assert _statuses(any_client, dataset_id) == ["committed"]


def test_chain_is_valid_after_cancel_releases(any_client: TestClient, any_db: Database) -> None:
    dataset_id = _dataset(any_client)
    job_id = _submit(any_client, dataset_id)
    assert any_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200

    result = _verify(any_client, dataset_id)
    assert result["valid"] and result["records"] == 3
    assert [e.kind for e in _events(any_db, dataset_id)] == ["budget", "reserve", "release"]
    assert _statuses(any_client, dataset_id) == ["released"]


def test_hash_is_sha256_of_canonical_json_and_prev_hash(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    job_id = _submit(any_client, dataset_id)
    budget, event = _events(any_db, dataset_id)
    with any_db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None and entry.left_out is not None
        assert len(entry.left_out["salt"]) == 32
        content = {
            "dataset_id": dataset_id, "entry_id": entry.id, "seq": 2, "kind": "reserve",
            "created_at": _iso(event.created_at),
            "entry": {
                "id": entry.id, "dataset_id": dataset_id, "job_id": job_id,
                "mechanism": entry.mechanism, "noise_multiplier": 2.0,
                "sample_rate": float(entry.sample_rate), "steps": entry.steps,
                "clip_norm": float(entry.clip_norm), "delta": float(entry.delta),
                "accountant": entry.accountant, "epsilon_rdp": entry.epsilon_rdp,
                "epsilon_prv": entry.epsilon_prv, "created_at": _iso(entry.created_at),
                # Hash scheme 2: the entry's dp-accounting event is covered too.
                "event": entry.event,
                # and whom the release left out (nobody here), with its salt
                "left_out": {"scope": [], "patterns": [], "salt": entry.left_out["salt"]},
            },
            "scheme": 2,
        }
        assert entry.event == {"type": "SelfComposedDpEvent", "count": entry.steps, "event": {
            "type": "PoissonSampledDpEvent", "sampling_probability": entry.sample_rate,
            "event": {"type": "GaussianDpEvent", "noise_multiplier": 2.0}}}
    assert event.scheme == budget.scheme == 2
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    assert event.prev_hash == budget.hash
    assert event.hash == hashlib.sha256((canonical + budget.hash).encode()).hexdigest()


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def test_chains_are_per_dataset(any_client: TestClient, any_db: Database) -> None:
    first, second = _dataset(any_client), _dataset(any_client)
    for dataset_id in (first, second, first, second, first):
        _submit(any_client, dataset_id)
    for dataset_id, n in ((first, 4), (second, 3)):
        events = _events(any_db, dataset_id)
        assert [e.seq for e in events] == list(range(1, n + 1))
        assert events[0].prev_hash == GENESIS
        result = _verify(any_client, dataset_id)
        assert result["valid"] and result["records"] == n


def test_editing_an_entrys_mechanism_breaks_the_chain_at_its_reserve(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    second_job = _submit(any_client, dataset_id)
    _submit(any_client, dataset_id)
    _raw(any_db, "UPDATE ledger_entry SET noise_multiplier = 5.0 WHERE job_id = :job",
         job=second_job)

    result = _verify(any_client, dataset_id)
    reserve = _events(any_db, dataset_id)[2]
    assert result["valid"] is False and result["records"] == 4
    assert result["first_invalid"]["id"] == reserve.id
    assert result["first_invalid"]["seq"] == 3
    assert "hash" in result["first_invalid"]["reason"]


def test_editing_an_events_kind_breaks_the_chain_there(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    cancelled = _submit(any_client, dataset_id)
    assert any_client.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200
    _submit(any_client, dataset_id)
    release = _events(any_db, dataset_id)[3]
    assert release.kind == "release"
    # Turning the release into a commit would silently charge the budget again.
    _raw(any_db, "UPDATE ledger_event SET kind = 'commit' WHERE id = :id", id=release.id)

    result = _verify(any_client, dataset_id)
    assert result["valid"] is False
    assert result["first_invalid"]["id"] == release.id and result["first_invalid"]["seq"] == 4


def test_rewriting_a_hash_breaks_the_link_to_the_next_record(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    _submit(any_client, dataset_id)
    _, _, second = _events(any_db, dataset_id)
    _raw(any_db, "UPDATE ledger_event SET prev_hash = :h WHERE id = :id", h="f" * 64,
         id=second.id)

    result = _verify(any_client, dataset_id)
    assert result["first_invalid"]["id"] == second.id
    assert "prev_hash" in result["first_invalid"]["reason"]


def test_deleting_a_record_is_detected(any_client: TestClient, any_db: Database) -> None:
    dataset_id = _dataset(any_client)
    job_id = _submit(any_client, dataset_id)
    assert any_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    _submit(any_client, dataset_id)
    events = _events(any_db, dataset_id)
    # Dropping the release would put the cancelled job's spend back on the budget.
    _raw(any_db, "DELETE FROM ledger_event WHERE id = :id", id=events[2].id)

    result = _verify(any_client, dataset_id)
    assert result["valid"] is False and result["records"] == 3
    assert result["first_invalid"]["id"] == events[3].id
    assert result["first_invalid"]["seq"] == 4
    assert "deleted" in result["first_invalid"]["reason"]


def test_deleting_the_last_record_is_detected(any_client: TestClient, any_db: Database) -> None:
    dataset_id = _dataset(any_client)
    job_id = _submit(any_client, dataset_id)
    assert any_client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    last = _events(any_db, dataset_id)[-1]
    _raw(any_db, "DELETE FROM ledger_event WHERE id = :id", id=last.id)

    result = _verify(any_client, dataset_id)
    assert result["valid"] is False
    assert result["first_invalid"] == {
        "id": None, "seq": 3, "reason": result["first_invalid"]["reason"]
    }
    assert "deleted" in result["first_invalid"]["reason"]


def test_an_entry_outside_the_chain_is_detected(any_client: TestClient, any_db: Database) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    second = _submit(any_client, dataset_id)
    with any_db.engine.begin() as conn:
        entry_id = conn.execute(
            text("SELECT id FROM ledger_entry WHERE job_id = :job"), {"job": second}
        ).scalar_one()
        # Remove the entry's only record and roll the head back: the chain itself is intact.
        head = conn.execute(
            text("SELECT hash FROM ledger_event WHERE entry_id = :e"), {"e": entry_id}
        ).scalar_one()
        prev = conn.execute(
            text("SELECT prev_hash FROM ledger_event WHERE entry_id = :e"), {"e": entry_id}
        ).scalar_one()
        assert head
        conn.execute(text("DELETE FROM ledger_event WHERE entry_id = :e"), {"e": entry_id})
        conn.execute(
            text("UPDATE dataset SET ledger_head_seq = 2, ledger_head_hash = :h WHERE id = :d"),
            {"h": prev, "d": dataset_id},
        )

    result = _verify(any_client, dataset_id)
    assert result["valid"] is False and result["records"] == 2
    assert result["first_invalid"]["id"] is None
    assert f"ledger_entry {entry_id}" in result["first_invalid"]["reason"]
    # Fails closed: the uncovered entry still counts against the budget.
    report = any_client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    assert len(report["entries"]) == 2 and report["spent"]["epsilon"] > 0


def test_verify_unknown_dataset_is_problem_json_404(any_client: TestClient) -> None:
    response = any_client.get("/v1/datasets/999999/ledger/verify")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"].endswith("/dataset-not-found")


def test_the_orm_refuses_to_update_or_delete_ledger_rows(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    with pytest.raises(AppendOnlyViolation), any_db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id))
        assert entry is not None
        entry.noise_multiplier = 0.5
        session.flush()
    with pytest.raises(AppendOnlyViolation), any_db.session_scope() as session:
        event = session.scalar(select(LedgerEvent).where(LedgerEvent.dataset_id == dataset_id))
        session.delete(event)
        session.flush()
    assert _verify(any_client, dataset_id)["valid"] is True


def test_raising_the_budget_behind_the_ledgers_back_is_detected(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    budget = _events(any_db, dataset_id)[0]
    _raw(any_db, "UPDATE dataset SET budget_epsilon = 99 WHERE id = :d", d=dataset_id)

    result = _verify(any_client, dataset_id)
    assert result["valid"] is False
    assert result["first_invalid"]["id"] == budget.id
    assert "budget" in result["first_invalid"]["reason"]


def test_a_budget_change_through_the_api_is_chained(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id = _dataset(any_client)
    _submit(any_client, dataset_id)
    response = any_client.put(
        f"/v1/datasets/{dataset_id}/privacy-budget", json={"epsilon": 9.5, "delta": 1e-5}
    )
    assert response.status_code == 200, response.text
    budget = response.json()["privacy_budget"]
    assert (budget["epsilon"], budget["delta"]) == (9.5, 1e-5)
    events = _events(any_db, dataset_id)
    assert [e.kind for e in events] == ["budget", "reserve", "budget"]
    assert (events[-1].budget_epsilon, events[-1].budget_delta) == (9.5, 1e-5)
    assert _verify(any_client, dataset_id)["valid"] is True
    # Tampering with a budget record's figures breaks its hash.
    _raw(any_db, "UPDATE ledger_event SET budget_epsilon = 50 WHERE id = :id", id=events[-1].id)
    _raw(any_db, "UPDATE dataset SET budget_epsilon = 50 WHERE id = :d", d=dataset_id)
    result = _verify(any_client, dataset_id)
    assert result["first_invalid"]["id"] == events[-1].id
    assert "hash" in result["first_invalid"]["reason"]
