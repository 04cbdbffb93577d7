"""0020 starts every existing patient space's budget chain with the budget it has (the chain
verifies and is anchored), adds an upload's overlap columns, and downgrades (SQLite and
PostgreSQL)."""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.ledger import space_chain
from app.ledger.spaces import PatientSpace

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_each_space_gets_its_first_record_and_the_revision_downgrades(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0019")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:  # a dataset's own space, as 0019 makes them
            conn.execute(text(
                "INSERT INTO patient_space (kind, budget_epsilon, budget_delta, filter_order, "
                "version, index_rows, created_at) VALUES ('dataset', 3, 1e-5, 7.5, 0, 0, :t)"),
                {"t": T0})
        command.upgrade(config, "0020")
        command.upgrade(config, "0021")  # the models' columns (no blocks here: no records)
        with db.session_scope() as session:
            found = session.scalars(sa.select(PatientSpace).order_by(PatientSpace.id)).all()
            assert [(s.kind, s.budget_epsilon, s.chain_head_seq) for s in found] == [
                ("organisation", 8.0, 1), ("dataset", 3.0, 1)]
            for space in found:
                verified = space_chain.verify(session=session, space=space)
                assert verified.valid and verified.budget_anchored and verified.records == 1
                assert verified.head_hash == space.chain_head_hash
        with db.engine.connect() as conn:
            assert conn.execute(text(
                "SELECT count(*) FROM dataset WHERE patient_overlap IS NOT NULL "
                "OR rows_equal_dataset_id IS NOT NULL")).scalar() == 0
        command.downgrade(config, "0020")
        command.downgrade(config, "0019")
        inspector = sa.inspect(db.engine)
        assert "patient_space_event" not in inspector.get_table_names()
        assert "chain_head_hash" not in {c["name"] for c in inspector.get_columns("patient_space")}
        assert "patient_overlap" not in {c["name"] for c in inspector.get_columns("dataset")}
    finally:
        db.dispose()
