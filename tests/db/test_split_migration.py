"""0006 recounts every dataset's training rows for the per-record split and downgrades back to
the fixed 70% permutation count; 0007 keys the coins by a per-dataset secret and recounts the
parts, fingerprints each source once, and fixes the filter's order; 0013 keeps those datasets
on the coins their parts were counted with; 0014 leaves their stored tables' layout as it was."""

from datetime import UTC, datetime

import numpy as np
from alembic import command
from sqlalchemy import text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.datasets import record_coins
from app.datasets.patients import identity
from app.privacy.filter import filter_order

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
DATASETS = {1: (2000, 11), 2: (8000, 7), 3: (100, 0)}  # id: (n_rows, seed)


def _coin_train_count(n_rows: int, seed: int) -> int:
    """0006's count: one position-keyed coin per row (replaced by keyed coins in 0007)."""
    return int(np.count_nonzero(np.random.default_rng([seed, 2]).random(n_rows) < 0.7))


def _n_train(db: Database) -> dict[int, int]:
    with db.engine.connect() as conn:
        return {row[0]: row[1] for row in conn.execute(text("SELECT id, n_train FROM dataset"))}


def test_upgrade_recounts_training_rows_and_downgrade_restores(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0005")
    db = Database(database_url)
    try:
        with db.engine.begin() as conn:
            for dataset_id, (n_rows, seed) in DATASETS.items():
                conn.execute(text(
                    "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
                    "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, "
                    "ledger_head_hash, created_at) VALUES (:id, 'd', 'synthetic', :n, :t70, "
                    ":seed, false, 10.0, 1e-05, 0, 0, :genesis, :t)"
                ), {"id": dataset_id, "n": n_rows, "t70": round(0.7 * n_rows), "seed": seed,
                    "genesis": "0" * 64, "t": T0})
        command.upgrade(config, "0006")
        assert _n_train(db) == {i: _coin_train_count(n, s) for i, (n, s) in DATASETS.items()}
        command.upgrade(config, "head")
        with db.engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT n_rows, n_train, n_calibration, record_secret, source_fingerprint, "
                "filter_order, coin_scheme, table_media_type FROM dataset ORDER BY id")).all()
        for n_rows, n_train, n_calibration, secret, fingerprint, order, scheme, media in rows:
            assert media is None  # 0014: a table stored before it stays in its own layout
            assert len(secret) == 64 and len(fingerprint) == 64
            # 0013: datasets registered before it keep the coins 0007 counted their parts by.
            assert scheme == record_coins.BLAKE2B_V1
            parts = identity.parts_of(range(n_rows), secret, scheme=scheme)
            assert (n_train, n_calibration) == (int(np.sum(parts == 0)), int(np.sum(parts == 1)))
            assert 0 < n_train < n_rows and 0 < n_calibration < n_rows - n_train
            assert abs(n_train - 0.7 * n_rows) < 5 * np.sqrt(n_rows)
            assert order == filter_order(10.0, 1e-5)
        command.downgrade(config, "0005")
        assert _n_train(db) == {i: round(0.7 * n) for i, (n, _) in DATASETS.items()}
    finally:
        db.dispose()
