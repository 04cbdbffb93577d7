"""0031 makes the job's DP-SGD columns nullable and clears the placeholders a monitoring run
or a comparison held (sample rate 1, one step, one epoch, clip norm 1); a training job keeps
its plan, and the downgrade writes the placeholders back (SQLite and PostgreSQL)."""

from datetime import UTC, datetime
from typing import Any

from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 12, 1, tzinfo=UTC)
PLAN = "sample_rate, steps, epochs, max_grad_norm"
TRAINED = (0.05, 400, 20, 1.5)


def _plans(db: Database) -> dict[int, tuple[Any, ...]]:
    with db.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, {PLAN} FROM job ORDER BY id")).all()
    return {int(row[0]): tuple(row[1:]) for row in rows}


def _insert(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
            "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, ledger_head_hash, "
            "created_at, state) VALUES (1, 'd', 'upload', 0, 0, 0, false, 10.0, 1e-05, 0, 0, "
            ":genesis, :t, 'awaiting_data')"), {"genesis": "0" * 64, "t": T0})
        for job_id, kind, plan in ((1, "train", TRAINED), (2, "monitoring", (1.0, 1, 1, 1.0)),
                                   (3, "comparison", (1.0, 1, 1, 1.0))):
            conn.execute(text(
                f"INSERT INTO job (id, dataset_id, status, kind, noise_multiplier, {PLAN}, "
                "delta, training, progress_epoch, epsilon_per_epoch, cancel_requested, "
                "created_at) VALUES (:id, 1, 'queued', :kind, 0.8, :q, :steps, :epochs, :c, "
                "1e-05, '{}', 0, '[]', false, :t)"),
                {"id": job_id, "kind": kind, "q": plan[0], "steps": plan[1], "epochs": plan[2],
                 "c": plan[3], "t": T0})


def test_one_release_jobs_lose_their_made_up_plan_and_get_it_back_on_downgrade(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0030")
    db = Database(database_url)
    try:
        _insert(db)
        command.upgrade(config, "0031")
        cleared = (None, None, None, None)
        assert _plans(db) == {1: TRAINED, 2: cleared, 3: cleared}
        command.downgrade(config, "0030")
        assert _plans(db) == {1: TRAINED, 2: (1.0, 1, 1, 1.0), 3: (1.0, 1, 1, 1.0)}
        command.upgrade(config, "head")
        assert _plans(db) == {1: TRAINED, 2: cleared, 3: cleared}
    finally:
        db.dispose()
