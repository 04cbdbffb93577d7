"""0024 adds ``dataset.union_of``: null for every dataset stored before it (none was a union);
the downgrade is refused while a union keeps rows, and drops the column once none does
(SQLite and PostgreSQL)."""

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 11, 28, tzinfo=UTC)


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("dataset")}


def test_no_dataset_becomes_a_union_and_the_downgrade_keeps_no_union(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0023")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
                "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, "
                "ledger_head_hash, created_at, state) VALUES (1, 'd', 'upload', 0, 0, 0, "
                "false, 10.0, 1e-05, 0, 0, :genesis, :t, 'ready')"), {"genesis": "0" * 64, "t": T0})
        command.upgrade(config, "0024")
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT union_of FROM dataset")).scalars().all() == [None]
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
                "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, "
                "ledger_head_hash, created_at, state, union_of) VALUES (2, 'u', 'union', 0, 0, "
                "0, false, 10.0, 1e-05, 0, 0, :genesis, :t, 'ready', '[1, 3]')"),
                {"genesis": "0" * 64, "t": T0})
        with pytest.raises(RuntimeError, match=r"datasets \[2\] are unions"):
            command.downgrade(config, "0023")
        assert "union_of" in _columns(db)  # refused: nothing changed
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE dataset SET state = 'erased' WHERE id = 2"))
        command.downgrade(config, "0023")
        assert "union_of" not in _columns(db)
        command.upgrade(config, "head")
        assert "union_of" in _columns(db)
    finally:
        db.dispose()
