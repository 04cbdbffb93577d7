"""Apply Alembic migrations programmatically (the only way the schema changes)."""

from alembic import command
from alembic.config import Config

from app.core.settings import REPO_ROOT, settings


def alembic_config(database_url: str | None = None) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(settings.alembic_dir))
    config.attributes["database_url"] = database_url or settings.database_url
    return config


def upgrade_head(database_url: str | None = None) -> None:
    """Bring the database at ``database_url`` (default: settings) to the newest revision."""
    command.upgrade(alembic_config(database_url), "head")
