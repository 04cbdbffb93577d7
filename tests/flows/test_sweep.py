"""Files a crash left behind are swept at start-up, and nothing else: a live upload's spool,
a referenced table or model, and a file whose transaction may still commit all stay."""

import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.database import get_database
from app.core.settings import settings
from app.flows import sweep
from tests.datasets.test_upload_api import _csv, _put, _register, _rows

OLD = time.time() - settings.upload_max_seconds - sweep.SETTLE_SECONDS - 60


def _aged(path: Path, at: float = OLD) -> Path:
    os.utime(path, (at, at))
    return path


def test_sweep_removes_only_orphans_old_enough(client: TestClient, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    data, models = tmp_path / "data", tmp_path / "models"
    monkeypatch.setattr(settings, "data_dir", data)
    dataset = _register(client)
    assert _put(client, dataset["id"], _csv(_rows(400))).status_code == 200
    kept = next(p for p in data.iterdir() if not p.name.startswith("."))
    _aged(kept)
    models.mkdir()
    spool = data / ".upload-dead"
    spool.mkdir()
    (spool / "body").write_bytes(b"patient_id,phq9\n")
    _aged(spool)
    live_spool = data / ".upload-live"
    live_spool.mkdir()
    orphan_table = data / f"{'a' * 64}.csv"
    orphan_table.write_bytes(b"rows")
    _aged(orphan_table)
    european = data / f"{'d' * 64}.delimiter-semicolon.decimal-comma.csv"
    european.write_bytes(b"rows")
    _aged(european)
    fresh_table = data / f"{'b' * 64}.csv"
    fresh_table.write_bytes(b"rows")  # its upload's transaction may be about to commit
    orphan_model = models / f"{'c' * 64}.pt"
    orphan_model.write_bytes(b"weights")
    _aged(orphan_model)
    with get_database().session_scope() as session:
        swept = sweep.sweep(session=session, data_dir=data, artifact_dir=models)
    assert swept.spools == [".upload-dead"]
    assert sorted(swept.tables) == sorted([orphan_table.name, european.name])
    assert swept.models == [orphan_model.name]
    assert kept.exists() and live_spool.exists() and fresh_table.exists()
    assert not spool.exists() and not orphan_table.exists() and not orphan_model.exists()
