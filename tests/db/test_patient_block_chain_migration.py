"""0021 chains the blocks written before the chain covered them: one "blocks" record per space
with live blocks (closed and empty ones left out), after which the chain verifies; downgrade
drops the records and the column (SQLite and PostgreSQL)."""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.ledger import space_chain
from app.ledger.spaces import PatientSpace

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def test_each_space_with_live_blocks_gets_its_baseline_and_the_revision_downgrades(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0020")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:
            space_id = conn.execute(text(
                "INSERT INTO patient_space (kind, budget_epsilon, budget_delta, filter_order, "
                "version, index_rows, created_at, chain_head_seq) "
                "VALUES ('dataset', 3, 1e-5, 7.5, 0, 0, :t, 0) RETURNING id"),
                {"t": T0}).scalar_one()
            for datasets, size, closed in (("[7]", 40, None), ("[7, 8]", 5, T0), ("[8]", 0, None)):
                conn.execute(text(
                    "INSERT INTO patient_block (space_id, datasets, size, created_at, closed_at) "
                    "VALUES (:s, :d, :n, :t, :c)"),
                    {"s": space_id, "d": datasets, "n": size, "t": T0, "c": closed})
        command.upgrade(config, "0021")
        with db.session_scope() as session:
            found = session.scalars(sa.select(PatientSpace).order_by(PatientSpace.id)).all()
            # The organisation's space (no blocks) keeps its one record; the new space had
            # none (it came after 0020) and gets its baseline only.
            assert [s.chain_head_seq for s in found] == [1, 1]
            for space in found:
                verified = space_chain.verify(session=session, space=space)
                assert verified.valid and verified.head_hash == space.chain_head_hash
            (baseline,) = space_chain.records(session=session, space_id=space_id)
            assert baseline.kind == "blocks" and baseline.blocks is not None
            assert [(b["datasets"], b["size"]) for b in baseline.blocks["opened"]] == [([7], 40)]
        command.downgrade(config, "0020")
        inspector = sa.inspect(db.engine)
        assert "blocks" not in {c["name"] for c in inspector.get_columns("patient_space_event")}
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT chain_head_seq FROM patient_space ORDER BY id")
                                ).scalars().all() == [1, 0]
    finally:
        db.dispose()
