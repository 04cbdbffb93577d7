"""Patient ids declared for the rows of a dataset received without them.

A private upload registered before patient spaces without an id column has rows whose ids are
their row numbers: nothing finds its patients in the organisation's other tables, so it takes
no release (``spaces.check_keyed``). Its data steward declares each row's patient id (one CSV
column, in the stored table's row order); they are kept beside the stored table in a file
named by its SHA-256, which the dataset records, and read wherever a release finds a row's
patient (``of``). The parts stay keyed by the row numbers, so no row moves between training
and held-out parts.
"""

import hashlib
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.feather as feather

from app.core.settings import settings
from app.datasets.intake.error_log import BatchRows, ErrorLog
from app.datasets.intake.id_rules import MAX_ID_CHARS, check_ids
from app.datasets.intake.ingest import TableInvalid
from app.datasets.intake.stored import StoredTableMismatch
from app.datasets.models import Dataset

SUFFIX = ".patient-ids.arrow"
COLUMN = "id"  # the one column's name in the kept file, whatever the steward's header said


def max_body_bytes(n_rows: int) -> int:
    """The largest body that can hold ``n_rows`` ids: a header, then per row an id of at most
    ``MAX_ID_CHARS`` characters of up to 4 UTF-8 bytes, quoted, with its line end."""
    return 4 * MAX_ID_CHARS + 4 + n_rows * (4 * MAX_ID_CHARS + 4)


def parse(path: Path, n_rows: int) -> pa.StringArray:
    """The ids of a one-column CSV (a header row, then one id per row), checked as an
    upload's id column is: every rule, one id per row, exactly ``n_rows`` of them.

    Raises:
        TableInvalid: a rule is broken (422 listing rows and the allowed form).
    """
    log = ErrorLog()
    try:
        table = pacsv.read_csv(
            path, read_options=pacsv.ReadOptions(column_names=[COLUMN], skip_rows=1),
            convert_options=pacsv.ConvertOptions(column_types={COLUMN: pa.string()},
                                                 strings_can_be_null=True))
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        log.add(f"not a one-column CSV: {exc}", "a header row, then one patient id per row")
        raise TableInvalid(log) from None
    ids = check_ids(table.column(COLUMN).combine_chunks(), COLUMN, BatchRows(0), log)
    if len(ids) != n_rows:
        log.add(f"{len(ids)} ids for {n_rows} rows",
                f"exactly {n_rows} ids, one per stored row in its order")
    elif not log and pc.count_distinct(ids).as_py() != n_rows:
        log.add("duplicate id", "a unique id per row (a patient is one row)", column=COLUMN)
    if log:
        raise TableInvalid(log)
    return ids


def store(dataset_id: int, ids: pa.StringArray) -> str:
    """Keep ``ids`` beside the datasets' tables, named by the dataset and the file's SHA-256;
    that digest (the caller records it on the dataset, ``Dataset.patient_ids_sha256``)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=settings.data_dir, prefix=".patient-ids-")
    os.close(handle)
    tmp = Path(name)
    try:
        feather.write_feather(pa.table({COLUMN: ids}), tmp, compression="uncompressed")
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        tmp.replace(_path(dataset_id, digest))
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def discard(dataset_id: int, digest: str) -> None:
    """Remove a kept file its dataset did not come to record (the declaration was refused)."""
    _path(dataset_id, digest).unlink(missing_ok=True)


def _path(dataset_id: int, digest: str) -> Path:
    return settings.data_dir / f"{dataset_id}-{digest}{SUFFIX}"


def of(dataset: Dataset, table_ids: pa.StringArray) -> pa.StringArray:
    """Each stored row's patient id: the declared ones where its steward declared them, else
    the table's own (``table_ids``, in row order).

    Raises:
        StoredTableMismatch: the kept file was edited, or holds another number of rows.
    """
    digest = dataset.patient_ids_sha256
    if digest is None:
        return table_ids
    path = _path(dataset.id, digest)
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise StoredTableMismatch(f"{path.name} no longer holds the ids declared for "
                                  f"dataset {dataset.id}")
    ids = feather.read_table(path, memory_map=False).column(COLUMN).combine_chunks()
    if len(ids) != len(table_ids):
        raise StoredTableMismatch(f"{path.name} holds {len(ids)} ids for {len(table_ids)} rows")
    return ids
