"""An upload's stored table reads back as accepted, in either layout
(app.datasets.intake.stored)."""

from pathlib import Path

import numpy as np
import pytest

from app.core.settings import settings
from app.datasets.intake import ingest, stored
from app.datasets.models import Dataset
from app.datasets.rules import upload_fingerprint
from tests.datasets.test_dataset_schema import CONTRACT
from tests.datasets.test_ingest import ROWS, SCHEMA, _legacy_file, write_csv


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _dataset(sha256: str, media_type: str | None, fingerprint: str) -> Dataset:
    return Dataset(id=7, name="clinic", source_kind="upload", n_rows=len(ROWS), seed=0,
                   schema_json=CONTRACT, table_sha256=sha256, table_media_type=media_type,
                   source_fingerprint=upload_fingerprint(fingerprint))


def test_a_kept_upload_and_a_table_in_the_old_layout_read_back_alike(
        tmp_path: Path, _data_dir: Path) -> None:
    source = write_csv(tmp_path / "t.csv", ROWS)
    pending = ingest.ingest_and_store(source, media_type=ingest.CSV, schema=SCHEMA,
                                      data_dir=_data_dir)
    kept = pending.commit()
    expected = ingest.ingest_file(source, media_type=ingest.CSV, schema=SCHEMA)
    legacy = _legacy_file(expected, _data_dir)
    for dataset in (_dataset(kept.sha256, ingest.CSV, pending.fingerprint),
                    _dataset(legacy.name.split(".")[0], None, pending.fingerprint)):
        assert stored.table_path(dataset).exists()
        table = stored.load_table(dataset)
        assert np.array_equal(table.features, expected.features)
        assert np.array_equal(table.outcome, expected.outcome)
        assert table.ids.to_pylist() == expected.ids.to_pylist()
        assert table.fingerprint == expected.fingerprint


def test_a_kept_table_that_reads_as_other_rows_is_refused(tmp_path: Path,
                                                          _data_dir: Path) -> None:
    """Same bytes, but registered under another source identity (as if the rules that read
    it had changed): refused, not trained on."""
    source = write_csv(tmp_path / "t.csv", ROWS)
    kept = ingest.ingest_and_store(source, media_type=ingest.CSV, schema=SCHEMA,
                                   data_dir=_data_dir).commit()
    with pytest.raises(stored.StoredTableMismatch, match="no longer reads"):
        stored.load_table(_dataset(kept.sha256, ingest.CSV, "another fingerprint"))
