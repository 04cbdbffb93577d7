"""0023 adds ``dataset.labelled``: true for every dataset stored before it (each carried its
outcome); the downgrade is refused while an unlabelled follow-up keeps rows or awaits them, and
drops the column once none does (SQLite and PostgreSQL)."""

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 11, 28, tzinfo=UTC)


def _labelled(db: Database) -> dict[int, bool]:
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, labelled FROM dataset ORDER BY id")).all()
    return {int(i): bool(labelled) for i, labelled in rows}


def test_existing_datasets_are_labelled_and_the_downgrade_keeps_no_unlabelled_one(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0022")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:
            for dataset_id in (1, 2):
                conn.execute(text(
                    "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
                    "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, "
                    "ledger_head_hash, created_at, state) VALUES (:id, 'd', 'upload', 0, 0, 0, "
                    "false, 10.0, 1e-05, 0, 0, :genesis, :t, 'awaiting_data')"
                ), {"id": dataset_id, "genesis": "0" * 64, "t": T0})
        command.upgrade(config, "0023")
        assert _labelled(db) == {1: True, 2: True}
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE dataset SET labelled = :no WHERE id = 2"), {"no": False})
        with pytest.raises(RuntimeError, match=r"datasets \[2\] are unlabelled"):
            command.downgrade(config, "0022")
        assert _labelled(db) == {1: True, 2: False}  # refused: nothing changed
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE dataset SET state = 'withdrawn' WHERE id = 2"))
        command.downgrade(config, "0022")
        assert "labelled" not in {c["name"] for c in inspect(db.engine).get_columns("dataset")}
        command.upgrade(config, "head")
        assert _labelled(db) == {1: True, 2: True}
    finally:
        db.dispose()
