"""0028 records each patient space's id scheme: "aes-v2" (the scheme of every index before it)
where the space keys ids, null where it keys none; the downgrade is refused while a space keys
its ids another way, and drops the column once none does (SQLite and PostgreSQL)."""

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in inspect(db.engine).get_columns("patient_space")}


def test_keyed_spaces_record_aes_v2_and_the_downgrade_keeps_no_other(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0027")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:  # a dataset's own space, as 0019 makes them
            conn.execute(text(
                "INSERT INTO patient_space (kind, budget_epsilon, budget_delta, filter_order, "
                "version, index_rows, created_at) VALUES ('dataset', 3, 1e-5, 7.5, 0, 0, :t)"),
                {"t": T0})
        command.upgrade(config, "0028")
        with db.engine.connect() as conn:
            found = conn.execute(text(
                "SELECT kind, id_scheme FROM patient_space ORDER BY id")).all()
        assert [tuple(row) for row in found] == [("organisation", "aes-v2"), ("dataset", None)]
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE patient_space SET id_scheme = 'blake2b-v1' "
                              "WHERE kind = 'organisation'"))
        with pytest.raises(RuntimeError, match="another scheme"):
            command.downgrade(config, "0027")
        assert "id_scheme" in _columns(db)  # refused: nothing changed
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE patient_space SET id_scheme = 'aes-v2' "
                              "WHERE kind = 'organisation'"))
        command.downgrade(config, "0027")
        assert "id_scheme" not in _columns(db)
        command.upgrade(config, "head")
        assert "id_scheme" in _columns(db)
    finally:
        db.dispose()
