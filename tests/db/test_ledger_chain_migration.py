"""0002 back-fills a valid hash chain from ledger_entry.status, 0003 chains each dataset's
budget after it, 0018 commits to the entries' dp-accounting events in a scheme record; all
downgrade back."""

from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.ledger import chain

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _seed_0001(db: Database) -> None:
    """Two datasets; entries reserved, committed and released as revision 0001 stored them."""
    with db.engine.begin() as conn:
        for dataset_id in (1, 2):
            conn.execute(text(
                "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
                "budget_epsilon, budget_delta, ledger_version, created_at) VALUES "
                "(:id, 'd', 'synthetic', 2000, 1400, 0, false, 10.0, 1e-05, 0, :t)"
            ), {"id": dataset_id, "t": T0})
        rows = [(1, 1, "committed", 1, 5), (2, 1, "reserved", 2, 2), (3, 1, "released", 3, 4),
                (4, 2, "committed", 1, 1)]
        for entry_id, dataset_id, status, created, updated in rows:
            conn.execute(text(
                "INSERT INTO job (id, dataset_id, status, noise_multiplier, sample_rate, steps, "
                "epochs, delta, max_grad_norm, training, progress_epoch, epsilon_per_epoch, "
                "cancel_requested, created_at) VALUES (:id, :d, 'queued', 2.0, 0.2, 15, 3, "
                "1e-05, 1.0, '{}', 0, '[]', false, :t)"
            ), {"id": entry_id, "d": dataset_id, "t": T0})
            conn.execute(text(
                "INSERT INTO ledger_entry (id, dataset_id, job_id, status, mechanism, "
                "noise_multiplier, sample_rate, steps, clip_norm, delta, accountant, "
                "epsilon_rdp, epsilon_prv, created_at, updated_at) VALUES (:id, :d, :id, :s, "
                "'poisson_subsampled_gaussian', 2.0, 0.2, 15, 1.0, 1e-05, 'rdp', 1.5, NULL, "
                ":c, :u)"
            ), {"id": entry_id, "d": dataset_id, "s": status,
                "c": T0 + timedelta(seconds=created), "u": T0 + timedelta(seconds=updated)})


def test_upgrade_backfills_a_valid_chain_and_downgrade_restores_status(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0001")
    db = Database(database_url)
    try:
        _seed_0001(db)
        command.upgrade(config, "head")
        with db.session_scope() as session:
            first = chain.verify(session=session, dataset_id=1)
            second = chain.verify(session=session, dataset_id=2)
        assert first["valid"] and first["records"] == 7 and first["budget_anchored"], first
        assert second["valid"] and second["records"] == 4, second
        with db.engine.connect() as conn:
            kinds = conn.execute(text(
                "SELECT entry_id, kind, budget_epsilon FROM ledger_event WHERE dataset_id = 1 "
                "ORDER BY seq"
            )).all()
        # In time order: reserves at created_at, commit/release at updated_at; then 0003's
        # budget record and 0018's scheme record.
        assert [tuple(k) for k in kinds] == [
            (1, "reserve", None), (2, "reserve", None), (3, "reserve", None),
            (3, "release", None), (1, "commit", None), (None, "budget", 10.0),
            (None, "scheme", None),
        ]

        command.downgrade(config, "0001")
        with db.engine.connect() as conn:
            statuses = conn.execute(
                text("SELECT id, status FROM ledger_entry ORDER BY id")
            ).all()
        assert [tuple(s) for s in statuses] == [
            (1, "committed"), (2, "reserved"), (3, "released"), (4, "committed")
        ]
        command.upgrade(config, "head")
        with db.session_scope() as session:
            assert chain.verify(session=session, dataset_id=1)["valid"]
    finally:
        db.dispose()
