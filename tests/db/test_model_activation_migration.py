"""0004 activates the newest existing model, so an upgraded service scores with the model it
used before; it downgrades back to 0003."""

from datetime import UTC, datetime

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.core.database import Database
from app.core.migrations import alembic_config

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _seed_models(db: Database, count: int) -> None:
    with db.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO dataset (id, name, source_kind, n_rows, n_train, seed, public, "
            "budget_epsilon, budget_delta, ledger_version, ledger_head_seq, ledger_head_hash, "
            "created_at) VALUES (1, 'd', 'synthetic', 2000, 1400, 0, false, 10.0, 1e-05, 0, 0, "
            ":genesis, :t)"
        ), {"t": T0, "genesis": "0" * 64})
        for model_id in range(1, count + 1):
            conn.execute(text(
                "INSERT INTO job (id, dataset_id, status, noise_multiplier, sample_rate, steps, "
                "epochs, delta, max_grad_norm, training, progress_epoch, epsilon_per_epoch, "
                "cancel_requested, created_at) VALUES (:id, 1, 'succeeded', 2.0, 0.2, 15, 3, "
                "1e-05, 1.0, '{}', 3, '[]', false, :t)"
            ), {"id": model_id, "t": T0})
            conn.execute(text(
                "INSERT INTO model (id, job_id, dataset_id, kind, artifact_sha256, "
                "feature_names, epsilon, epsilon_rdp, delta, accountant, metrics, "
                "band_thresholds, created_at) VALUES (:id, :id, 1, 'logistic', :sha, '[]', 2.0, "
                "2.5, 1e-05, 'prv', '{}', '{}', :t)"
            ), {"id": model_id, "sha": f"{model_id:064x}", "t": T0})


@pytest.mark.parametrize("models", [0, 3])
def test_upgrade_activates_the_newest_model(database_url: str, models: int) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0003")
    db = Database(database_url)
    try:
        _seed_models(db, models)
        command.upgrade(config, "head")
        with db.engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT seq, model_id, previous_model_id, action FROM model_activation"
            )).all()
        assert [tuple(r) for r in rows] == ([(1, models, None, "auto")] if models else [])

        command.downgrade(config, "0003")
        assert "model_activation" not in inspect(db.engine).get_table_names()
        command.upgrade(config, "head")
        assert "model_activation" in inspect(db.engine).get_table_names()
    finally:
        db.dispose()
