"""The table readers of an upload: CSV and Parquet, batch by batch, one batch read ahead.

Formats: ``text/csv`` (UTF-8 without a byte order mark, comma-separated, a header row naming
every column of the schema exactly once, order free, no other column; an empty cell is a missing
value; a value cannot span lines) and ``application/vnd.apache.parquet``. Both are read in
batches (1 MiB of CSV, 64k Parquet rows) on a reading thread (``app.datasets.prefetch``) while
the consumer checks the batch before (``app.datasets.ingest``).

A header (or Parquet schema) that does not match the declared schema is logged and nothing is
read. A CSV line with a wrong number of fields is dropped and logged with its physical line
(Arrow's serial parser knows it; values never span lines); ``skipped`` lists those lines so the
rows after them keep their numbers.
"""

import csv
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.datasets.dataset_schema import DatasetSchema, FeatureKind
from app.datasets.growing_file import GrowingFile
from app.datasets.ingest_checks import ErrorLog
from app.datasets.prefetch import Prefetched
from app.datasets.schemas import MAX_ROWS

CSV, PARQUET = "text/csv", "application/vnd.apache.parquet"
CSV_BLOCK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = 1 << 16
_BOM = b"\xef\xbb\xbf"
_HEADER_BYTES = 1 << 20


def _header_errors(names: list[str], schema: DatasetSchema, log: ErrorLog) -> None:
    expected = schema.columns
    listed = ", ".join(expected)
    for name in sorted({n for n in names if names.count(n) > 1}):
        log.add("column appears more than once", "each column once", column=name)
    for name in [c for c in expected if c not in names]:
        log.add("missing column", f"the columns {listed}", column=name)
    for name in [n for n in names if n not in expected]:
        log.add("unexpected column", f"the columns {listed}", column=name)


Source = Path | GrowingFile
"""A spooled file, or a body still arriving (read as it comes)."""


def _open(source: Source) -> BinaryIO:
    if isinstance(source, Path):
        return source.open("rb")
    return source.reader()  # type: ignore[return-value]  # read-only, sequential


def _csv_header(source: Source, schema: DatasetSchema, log: ErrorLog) -> None:
    with _open(source) as f:
        head = f.read(_HEADER_BYTES).split(b"\n", 1)[0].rstrip(b"\r")
    if not head:
        log.add("the file is empty or its first line is blank", "a header row")
        return
    if head.startswith(_BOM):
        log.add("the file starts with a UTF-8 byte order mark", "UTF-8 without a BOM")
        return
    try:
        names = next(csv.reader([head.decode("utf-8")]))
    except UnicodeDecodeError:
        log.add("the header is not valid UTF-8", "UTF-8 text")
        return
    if len(names) == 1 and (";" in names[0] or "\t" in names[0]):
        found = "semicolons" if ";" in names[0] else "tabs"
        log.add(f"the header is separated by {found}", "comma-separated values")
        return
    _header_errors(names, schema, log)


def _csv_types(schema: DatasetSchema, *, as_bytes: bool) -> dict[str, pa.DataType]:
    if as_bytes:
        return {name: pa.binary() for name in schema.columns}
    types = {f.name: pa.string() if f.kind is FeatureKind.CATEGORICAL else pa.float64()
             for f in schema.features}
    types |= {a.name: pa.string() for a in schema.attributes}
    types[schema.outcome.name] = pa.float64()
    if schema.id_column is not None:
        types[schema.id_column] = pa.string()
    return types


def csv_batches(source: Source, schema: DatasetSchema, log: ErrorLog, skipped: list[int], *,
                 as_bytes: bool) -> Generator[pa.RecordBatch, None, None]:
    _csv_header(source, schema, log)
    if log:
        log.complete = False
        return

    def noted(events: list[tuple[int, int, int]]) -> None:
        """Apply, in reading order, the rows the reader dropped (a wrong number of fields)."""
        for line, actual, expected in events:
            skipped.append(line)
            log.add(f"{actual} fields instead of {expected}",
                    f"{expected} comma-separated fields", rows=np.array([line]))

    def bad_row(row: Any) -> str:
        # Serial parsing (use_threads=False) gives the physical line; values never span lines.
        # Called on the reading thread: noted with the batch, applied by the consumer.
        batches.note((row.number - 1, row.actual_columns, row.expected_columns))
        return "skip"

    # Created first: opening parses the first block, and bad_row may already be called.
    batches: Prefetched[pa.RecordBatch, tuple[int, int, int]] = Prefetched(
        lambda: _next_or_none(reader), on_failure=noted)
    with _open(source) as body:
        try:
            reader = pa_csv.open_csv(
                body,
                read_options=pa_csv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
                parse_options=pa_csv.ParseOptions(delimiter=",", invalid_row_handler=bad_row),
                convert_options=pa_csv.ConvertOptions(
                    column_types=_csv_types(schema, as_bytes=as_bytes), null_values=[""],
                    strings_can_be_null=True, include_columns=schema.columns),
            )
        except pa.ArrowInvalid:
            noted(batches.take_noted())
            raise
        with batches:
            for batch, events in batches:
                noted(events)
                if batch is not None:
                    yield batch


def _next_or_none(reader: Any) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


def parquet_batches(source: Source, schema: DatasetSchema,
                     log: ErrorLog) -> Generator[pa.RecordBatch, None, None]:
    try:
        if isinstance(source, GrowingFile):
            source.wait_complete()  # Parquet is read from its footer, at the end
        table = pq.ParquetFile(source if isinstance(source, Path) else source.path)
    except (pa.ArrowInvalid, OSError):
        log.add("not a Parquet file", PARQUET)
        log.complete = False
        return
    _header_errors(table.schema_arrow.names, schema, log)
    for field in table.schema_arrow:
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if field.name in schema.columns and not _readable(kind):
            log.add(f"a column of type {kind} cannot be read", "numbers or text",
                    column=field.name)
    if table.metadata.num_rows > MAX_ROWS:
        log.add(f"{table.metadata.num_rows} rows", f"at most {MAX_ROWS} rows")
    if log:
        log.complete = False
        return
    batches: Prefetched[pa.RecordBatch, None] = Prefetched(lambda: next(reading, None))
    reading = table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=schema.columns)
    with batches:
        for batch, _ in batches:
            if batch is not None:
                yield batch


def _readable(kind: pa.DataType) -> bool:
    return any(test(kind) for test in (
        pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_decimal,
        pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_null))
