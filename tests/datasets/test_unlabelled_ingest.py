"""An unlabelled follow-up's table (features only) against the model's declared schema: read
without its outcome column (NaN) and with the same fingerprint on every read; an outcome column
there is refused by name, and a labelled table without its outcome is still refused."""

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from app.core.errors import InvalidRequest
from app.datasets.intake import ingest, stored
from app.datasets.models import READY, Dataset
from app.datasets.schema import labels
from app.datasets.schema.dataset_schema import DatasetSchema, FeaturesOnly, schema_hash
from app.datasets.schemas import FollowUp
from app.jobs.service import check_trainable
from tests.datasets.test_dataset_schema import CONTRACT
from tests.datasets.test_ingest import HEADER, ROWS, found, rejected, write_csv, write_parquet

SCHEMA = DatasetSchema.model_validate(CONTRACT)
UNLABELLED = FeaturesOnly.model_validate(CONTRACT)
FEATURES = HEADER[:-1]  # every column but crisis_30d
FEATURE_ROWS = [row[:-1] for row in ROWS]


def test_the_view_is_the_declaration_without_its_outcome_column() -> None:
    assert schema_hash(UNLABELLED) == schema_hash(SCHEMA)  # still the model's schema
    assert UNLABELLED.columns == FEATURES and SCHEMA.columns == HEADER
    assert SCHEMA.labelled and not UNLABELLED.labelled


@pytest.mark.parametrize("write, media", [(write_csv, ingest.CSV),
                                          (write_parquet, ingest.PARQUET)])
def test_a_features_only_table_reads_with_no_outcome(tmp_path: Path,
                                                     write: Callable[..., Path],
                                                     media: str) -> None:
    path = write(tmp_path / "t", FEATURE_ROWS, FEATURES)
    table = ingest.ingest_file(path, media_type=media, schema=UNLABELLED)
    labelled = ingest.ingest_file(write_csv(tmp_path / "l.csv", ROWS), media_type=ingest.CSV,
                                  schema=SCHEMA)
    assert table.n_rows == len(ROWS) and np.isnan(table.outcome).all()
    assert np.array_equal(table.features, labelled.features)
    assert table.ids.to_pylist() == labelled.ids.to_pylist()
    assert table.fingerprint != labelled.fingerprint  # other content: no outcome


def test_the_upload_and_its_reload_agree(tmp_path: Path) -> None:
    """The stored table is checked against the fingerprint its upload recorded."""
    path = write_csv(tmp_path / "t.csv", FEATURE_ROWS, FEATURES)
    pending = ingest.ingest_and_store(path, media_type=ingest.CSV, schema=UNLABELLED,
                                      data_dir=tmp_path / "data")
    loaded = ingest.ingest_file(pending.commit().path, media_type=ingest.CSV,
                               schema=UNLABELLED)
    assert pending.n_rows == loaded.n_rows == len(ROWS)
    assert pending.fingerprint == loaded.fingerprint


def test_an_outcome_column_in_an_unlabelled_table_is_refused_by_name(tmp_path: Path) -> None:
    error = rejected(write_csv(tmp_path / "t.csv", ROWS), UNLABELLED)
    assert [(row, column) for row, column, _ in found(error)] == [(None, "crisis_30d")]
    assert "unlabelled follow-up carries no outcome column" in found(error)[0][2]


def test_a_labelled_table_without_its_outcome_is_still_refused(tmp_path: Path) -> None:
    error = rejected(write_csv(tmp_path / "t.csv", FEATURE_ROWS, FEATURES))
    assert found(error) == [(None, "crisis_30d", "missing column")]


def test_a_features_only_table_still_breaks_the_feature_rules(tmp_path: Path) -> None:
    rows = [row[:] for row in FEATURE_ROWS]
    rows[1][1] = "28"
    error = rejected(write_csv(tmp_path / "t.csv", rows, FEATURES), UNLABELLED)
    assert found(error) == [(2, "phq9", "outside the declared bounds")]


def _dataset(labelled: bool | None) -> Dataset:
    return Dataset(id=7, schema_json=SCHEMA.model_dump(mode="json", by_alias=True),
                   state=READY, labelled=labelled)


def test_the_stored_table_is_read_under_the_dataset_s_view() -> None:
    assert isinstance(stored.table_schema(_dataset(False)), FeaturesOnly)
    for labelled in (True, None):  # None: a row not yet flushed takes the default, true
        assert stored.table_schema(_dataset(labelled)).labelled


def test_nothing_trains_on_an_unlabelled_follow_up() -> None:
    with pytest.raises(labels.DatasetUnlabelled) as caught:
        check_trainable(_dataset(False))
    assert isinstance(caught.value, InvalidRequest) and caught.value.status == 422
    assert caught.value.field == "dataset_id" and "dataset 7" in caught.value.detail
    check_trainable(_dataset(True))


def test_a_follow_up_is_labelled_unless_it_says_otherwise() -> None:
    period = {"model_id": 1, "period_start": "2026-01-01", "period_end": "2026-06-30"}
    assert FollowUp.model_validate(period).labelled
    assert not FollowUp.model_validate({**period, "labelled": False}).labelled
    with pytest.raises(ValueError, match="true or false"):
        FollowUp.model_validate({**period, "labelled": "no"})
