"""0016 admits the data steward role without touching existing keys or the audit log's links
to them, and downgrades by revoking steward keys (on SQLite and PostgreSQL)."""

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
INSERT_KEY = text("INSERT INTO api_key (id, name, role, key_sha256, created_at) "
                  "VALUES (:id, :name, :role, :digest, :t)")


def _steward(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(INSERT_KEY, {"id": 3, "name": "steward", "role": "data_steward",
                                  "digest": "3" * 64, "t": T0})
        conn.execute(text(
            "INSERT INTO audit_event (at, api_key_id, actor, role, action, detail) "
            "VALUES (:t, 3, 'steward', 'data_steward', 'dataset.registered', '{}')"), {"t": T0})


def test_upgrade_admits_stewards_keeps_keys_and_downgrade_revokes_them(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0015")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:
            for i, role in ((1, "admin"), (2, "data_scientist")):
                conn.execute(INSERT_KEY, {"id": i, "name": role, "role": role,
                                          "digest": str(i) * 64, "t": T0})
            conn.execute(text(
                "INSERT INTO audit_event (at, api_key_id, actor, role, action, detail) "
                "VALUES (:t, 2, 'data_scientist', 'data_scientist', 'job.submitted', '{}')"),
                {"t": T0})
        with pytest.raises(IntegrityError):
            _steward(db)  # not a role before 0016

        command.upgrade(config, "0016")
        _steward(db)
        with db.engine.connect() as conn:
            roles = conn.execute(text("SELECT id, role, revoked_at FROM api_key ORDER BY id"))
            assert [tuple(r) for r in roles] == [
                (1, "admin", None), (2, "data_scientist", None), (3, "data_steward", None)]
            linked = conn.execute(text("SELECT api_key_id FROM audit_event ORDER BY id"))
            assert list(linked.scalars()) == [2, 3]
        with pytest.raises(IntegrityError), db.engine.begin() as conn:
            conn.execute(INSERT_KEY, {"id": 4, "name": "x", "role": "steward",
                                      "digest": "4" * 64, "t": T0})
        with pytest.raises(IntegrityError), db.engine.begin() as conn:  # still enforced
            conn.execute(text("INSERT INTO audit_event (at, api_key_id, actor, action, detail) "
                              "VALUES (:t, 99, 'nobody', 'x', '{}')"), {"t": T0})

        command.downgrade(config, "0015")
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, role, revoked_at FROM api_key ORDER BY id"))
            keys = {r.id: (r.role, r.revoked_at is not None) for r in rows}
            assert keys == {1: ("admin", False), 2: ("data_scientist", False),
                            3: ("data_scientist", True)}
            events = conn.execute(text("SELECT role FROM audit_event ORDER BY id")).scalars()
            assert list(events) == ["data_scientist", "data_scientist"]
        command.upgrade(config, "head")
    finally:
        db.dispose()
