"""An upload's file without the columns its schema ignores (``extra_columns`` "ignore").

The service keeps a clinic's file as sent (``table_store.keep_as_sent``), but a column the
schema ignores must never be kept: a file that had one is rewritten, once it passed every
rule, with the schema's columns only, in its own format and dialect, next to the spool
(``projected_path``), and that file is what is kept, named by its own bytes. Only the
schema's columns are read (a Parquet file's other columns are never decoded); the values are
written as the reader saw them as text, so the kept file reads back to the same rows.
"""

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.datasets.intake.table_format import PARQUET, TableFormat
from app.datasets.schema.dataset_schema import DatasetSchema

_BATCH_ROWS = 65_536
_BLOCK_BYTES = 1 << 20


def projected_path(source: Path) -> Path:
    """Where the projection of the spool at ``source`` is written (the caller removes it)."""
    return source.with_name(f"{source.name}.columns")


def project(source: Path, fmt: TableFormat, schema: DatasetSchema) -> Path:
    """Write the schema's columns of the valid table at ``source`` to ``projected_path``."""
    target = projected_path(source)
    if fmt.media_type == PARQUET:
        _parquet(source, target, schema.columns)
    else:
        _csv(source, target, fmt, schema.columns)
    return target


def _parquet(source: Path, target: Path, columns: list[str]) -> None:
    batches = pq.ParquetFile(source).iter_batches(batch_size=_BATCH_ROWS, columns=columns)
    first = next(batches)  # a valid table has rows
    with pq.ParquetWriter(target, first.schema) as writer:
        writer.write_batch(first)
        for batch in batches:
            writer.write_batch(batch)


def _csv(source: Path, target: Path, fmt: TableFormat, columns: list[str]) -> None:
    """Every kept value as text (every one passed the rules, so is valid UTF-8), quoted where
    it must be; an empty cell stays empty (missing)."""
    reader = pa_csv.open_csv(
        source,
        read_options=pa_csv.ReadOptions(use_threads=False, block_size=_BLOCK_BYTES),
        parse_options=pa_csv.ParseOptions(delimiter=fmt.delimiter),
        convert_options=pa_csv.ConvertOptions(
            column_types=dict.fromkeys(columns, pa.string()), null_values=[""],
            strings_can_be_null=True, include_columns=columns))
    options = pa_csv.WriteOptions(delimiter=fmt.delimiter, quoting_style="needed")
    with pa_csv.CSVWriter(target, reader.schema, write_options=options) as writer:
        for batch in reader:
            writer.write_batch(batch)
