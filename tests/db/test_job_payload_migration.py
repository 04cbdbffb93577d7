"""0034 moves each non-training kind's payload out of ``job.training`` into ``job.payload``
(a monitoring run's and a comparison's training becomes null; a federated part and an audit
keep their training request without it), and the downgrade puts it back under its old key
(SQLite and PostgreSQL)."""

import json
from datetime import UTC, datetime
from typing import Any

from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import chain
from tests.conftest import FAST_TRAINING, small_dataset

T0 = datetime(2026, 12, 1, tzinfo=UTC)
RECIPE = {"model": "logistic", "epochs": 3, "batch_size": 64}
SEARCH = {**RECIPE, "search": {"candidates": [{}], "mean_runs": 2.0}}
PART = {"id": 4, "name": "net", "address": "coordinator:9092", "site": "clinic-a",
        "rounds": 3, "local_steps": 2, "round_timeout_seconds": 120}
AUDIT = {"job_id": 1, "canaries": 1000, "shadow_models": 8, "seed": 0, "confidence": 0.95}
MONITORING = {"model_id": 7, "notes": ["no data drift: no reference"]}
COMPARISON = {"champion_id": 7, "challenger_id": 8, "notes": []}
BEFORE = {
    1: ("train", SEARCH),
    2: ("monitoring", {"monitoring": MONITORING}),
    3: ("comparison", {"comparison": COMPARISON}),
    4: ("federated", {**RECIPE, "federation": PART}),
    5: ("privacy_audit", {**RECIPE, "audit": AUDIT}),
}
AFTER = {  # id -> (training, payload)
    1: (SEARCH, None),
    2: (None, MONITORING),
    3: (None, COMPARISON),
    4: (RECIPE, PART),
    5: (RECIPE, AUDIT),
}


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _jobs(db: Database, columns: str) -> dict[int, tuple[Any, ...]]:
    with db.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, {columns} FROM job ORDER BY id")).all()
    return {int(row[0]): tuple(_loaded(v) for v in row[1:]) for row in rows}


def _insert(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
            "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, ledger_head_hash, "
            "created_at, state) VALUES (1, 'd', 'upload', 0, 0, 0, false, 10.0, 1e-05, 0, 0, "
            ":genesis, :t, 'awaiting_data')"), {"genesis": "0" * 64, "t": T0})
        for job_id, (kind, training) in BEFORE.items():
            conn.execute(text(
                "INSERT INTO job (id, dataset_id, status, kind, noise_multiplier, delta, "
                "training, progress_epoch, epsilon_per_epoch, cancel_requested, created_at) "
                "VALUES (:id, 1, 'succeeded', :kind, 0.8, 1e-05, :training, 0, '[]', false, "
                ":t)"), {"id": job_id, "kind": kind, "training": json.dumps(training), "t": T0})


def test_payloads_leave_the_training_request_and_come_back_on_downgrade(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0033")
    db = Database(database_url)
    try:
        _insert(db)
        command.upgrade(config, "0034")
        assert _jobs(db, "training, payload") == AFTER
        with db.engine.connect() as conn:  # SQL NULL, not the JSON text 'null'
            nulls = conn.execute(text("SELECT id FROM job WHERE training IS NULL")).all()
        assert sorted(row[0] for row in nulls) == [2, 3]
        command.downgrade(config, "0033")
        assert _jobs(db, "training") == {i: (training,) for i, (_, training) in BEFORE.items()}
        command.upgrade(config, "head")
        assert _jobs(db, "training, payload") == AFTER
    finally:
        db.dispose()


def test_a_ledger_chain_verifies_across_the_revision(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "head")
    db = Database(database_url)
    try:
        with db.session_scope() as session:
            dataset = dataset_service.create(
                session=session, request=DatasetCreate.model_validate(small_dataset()))
            training_flow.submit_training(session=session, request=JobCreate.model_validate(
                {"dataset_id": dataset.id, "privacy": {"noise_multiplier": 2.0},
                 "training": FAST_TRAINING}))
            dataset_id = dataset.id
        for move in (command.downgrade, command.upgrade):
            move(config, "0033" if move is command.downgrade else "head")
            with db.session_scope() as session:
                verified = chain.verify(session=session, dataset_id=dataset_id)
            assert verified["valid"] and verified["records"] >= 2, verified
    finally:
        db.dispose()
