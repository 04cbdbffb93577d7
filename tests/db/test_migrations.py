"""The Alembic migrations and the SQLAlchemy models describe the same schema."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from app.core.database import Database
from app.db_models import Base


def test_autogenerate_finds_no_difference(any_db: Database) -> None:
    with any_db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_every_table_exists(any_db: Database) -> None:
    tables = set(inspect(any_db.engine).get_table_names())
    assert {"dataset", "job", "ledger_entry", "model", "alembic_version"} <= tables
