"""0009 drops the stored key prefixes (8 secret characters each), keeps old keys working, and
gives existing idempotency records the API key that made their resource; it downgrades."""

from datetime import UTC, datetime

from alembic import command
from sqlalchemy import inspect, text

from app.auth import service
from app.auth.models import ApiKey
from app.core.database import Database
from app.core.migrations import alembic_config

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
OLD_KEY = "dpk_" + "Z" * 43


def _seed(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO api_key (id, name, role, prefix, key_sha256, created_at) VALUES "
            "(1, 'ops', 'admin', :prefix, :digest, :t), "
            "(2, 'ds', 'data_scientist', 'dpk_YYYYYYYY', :other, :t)"),
            {"prefix": OLD_KEY[:12], "digest": service.digest(OLD_KEY), "other": "0" * 64,
             "t": T0})
        conn.execute(text(
            "INSERT INTO audit_event (at, api_key_id, actor, role, action, target, detail) VALUES "
            "(:t, 2, 'ds', 'data_scientist', 'job.submitted', 'job/7', '{}'), "
            "(:t, 1, 'ops', 'admin', 'dataset.registered', 'dataset/3', '{}')"), {"t": T0})
        conn.execute(text(
            "INSERT INTO idempotency_key (route, key, body_sha256, resource_id, created_at) "
            "VALUES ('POST /v1/jobs', 'k', :h, 7, :t), ('POST /v1/datasets', 'k', :h, 3, :t), "
            "('POST /v1/jobs', 'gone', :h, 99, :t)"), {"h": "a" * 64, "t": T0})


def test_upgrade_drops_prefixes_keeps_keys_and_owns_idempotency_records(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0008")
    db = Database(database_url)
    try:
        _seed(db)
        command.upgrade(config, "head")
        columns = {c["name"] for c in inspect(db.engine).get_columns("api_key")}
        assert "prefix" not in columns and "public_id" in columns
        with db.session_scope() as session:
            key = service.authenticate(session=session, secret=OLD_KEY)
            assert key is not None and key.public_id is None and key.display_id == "key-1"
            assert "ZZZZ" not in repr({c: getattr(key, c) for c in columns})
        with db.engine.connect() as conn:
            owners = dict(conn.execute(text(
                "SELECT key || ':' || CAST(resource_id AS VARCHAR(10)), api_key_id "
                "FROM idempotency_key")).all())
        assert owners == {"k:7": 2, "k:3": 1, "gone:99": None}
        with db.engine.begin() as conn:  # now another key may use "k" on the jobs route too
            conn.execute(text(
                "INSERT INTO idempotency_key (api_key_id, route, key, body_sha256, resource_id, "
                "created_at) VALUES (1, 'POST /v1/jobs', 'k', :h, 8, :t)"),
                {"h": "b" * 64, "t": T0})

        command.downgrade(config, "0008")  # keys global again: the first record of each stays
        with db.engine.connect() as conn:
            prefixes = conn.execute(text("SELECT prefix FROM api_key ORDER BY id")).scalars()
            assert list(prefixes) == ["key-1", "key-2"]
            kept = conn.execute(text("SELECT resource_id FROM idempotency_key ORDER BY id"))
            assert list(kept.scalars()) == [7, 3, 99]
    finally:
        db.dispose()


def test_the_model_matches_the_migration() -> None:
    assert ApiKey.__table__.c.public_id.unique and "prefix" not in ApiKey.__table__.c
