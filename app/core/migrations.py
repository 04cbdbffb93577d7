"""Apply Alembic migrations programmatically (the only way the schema changes)."""

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.core.database import build_engine
from app.core.settings import REPO_ROOT, settings

_MIGRATION_LOCK = "SELECT pg_advisory_lock(hashtext('dpcrisis-migrate:' || current_schema()))"
"""One migrator per schema at a time; released when its connection closes."""


def alembic_config(database_url: str | None = None) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(settings.alembic_dir))
    config.attributes["database_url"] = database_url or settings.database_url
    return config


def upgrade_head(database_url: str | None = None) -> None:
    """Bring the database at ``database_url`` (default: settings) to the newest revision.

    On PostgreSQL under an advisory lock: an API and N workers starting together
    (``docker compose up --scale worker=N``) would otherwise race to create the same tables;
    with the lock one migrates and the others wait, then find nothing to do.
    """
    url = database_url or settings.database_url
    config = alembic_config(url)
    if not url.startswith("postgresql"):
        command.upgrade(config, "head")
        return
    engine = build_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text(_MIGRATION_LOCK))
            connection.commit()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()


def at_head(database_url: str | None = None) -> bool:
    """Whether the database answers and is at the newest revision (``dpcrisis check``)."""
    config = alembic_config(database_url)
    heads = set(ScriptDirectory.from_config(config).get_heads())
    engine = build_engine(config.attributes["database_url"])
    try:
        with engine.connect() as connection:
            current = set(MigrationContext.configure(connection).get_current_heads())
    except SQLAlchemyError:
        return False
    finally:
        engine.dispose()
    return current == heads
