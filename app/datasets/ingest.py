"""Read an uploaded table against its declared schema: streamed, bounded memory, all or nothing.

Formats: ``text/csv`` (UTF-8 without a byte order mark, comma-separated, a header row naming
every column of the schema exactly once, order free, no other column; an empty cell is a missing
value; a value cannot span lines) and ``application/vnd.apache.parquet``. Both are read in
batches (1 MiB of CSV, 64k Parquet rows), each batch checked and reduced to float64 arrays
before the next is read, so memory is the validated arrays plus one batch.

CSV is read twice only when it is invalid: the fast pass lets Arrow parse numbers with explicit
column types; if Arrow meets text it cannot convert, the file is read again with every column
as bytes, and each value is classified (number, NaN/infinity, text, bad UTF-8) to name its row.
Arrow's streaming CSV reader is single-threaded (its whole-file ``read_csv`` is not): on two
cores ingesting costs about twice a bare ``read_csv`` (bench/ingest.py), on many cores more.
Blank lines are skipped and not counted as rows.

Errors: the first 100 in reading order, each ``{"row", "column", "message", "allowed"}`` with
``row`` the 1-based data row (header excluded; null for the header and table-wide rules), and the
exact ``total``. ``complete`` is false when reading stopped early, so ``total`` is a lower
bound: at the batch that crosses 2,000,000 rows, before the rows when the header (or the Parquet
schema) does not match, or at a file that cannot be parsed. Duplicate ids, zero rows and a
single outcome class are checked once all rows are read, and only when no other rule broke.
"""

import csv
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.core.errors import DomainError, InvalidRequest, UnsupportedMediaType
from app.datasets.dataset_schema import DatasetSchema, FeatureKind, check_schema
from app.datasets.ingest_checks import BatchRows, CheckedBatch, ErrorLog, check_batch
from app.datasets.schemas import MAX_ROWS
from app.datasets.table_store import IngestedTable, fingerprint_of, row_hashes

CSV, PARQUET = "text/csv", "application/vnd.apache.parquet"
MEDIA_TYPES = (CSV, PARQUET)
CSV_BLOCK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = 1 << 16
_BOM = b"\xef\xbb\xbf"
_HEADER_BYTES = 1 << 20


class TableInvalid(InvalidRequest):
    """The table breaks its schema: a 422 listing the errors (``errors``, ``total``)."""

    kind, title = "invalid-table", "Invalid table"

    def __init__(self, log: ErrorLog) -> None:
        log.flush()
        more = "" if log.complete else " (or more: reading stopped early)"
        super().__init__(
            f"the table breaks its schema in {log.total} place(s){more}; nothing was stored",
            errors=log.items, total=log.total, complete=log.complete,
        )


class UploadTooLarge(DomainError):
    status, kind, title = 413, "upload-too-large", "Upload too large"


def media_type_of(content_type: str) -> str:
    """``text/csv; charset=utf-8`` -> ``text/csv``; anything else we cannot read is a 422."""
    media, *params = (part.strip().lower() for part in content_type.split(";"))
    charsets = [p.removeprefix("charset=").strip('"') for p in params if p.startswith("charset=")]
    if media not in MEDIA_TYPES or any(c not in ("utf-8", "utf8") for c in charsets):
        raise UnsupportedMediaType(f"cannot read a table of type {content_type!r}",
                                   field="Content-Type", allowed=f"{CSV} (UTF-8) or {PARQUET}")
    return media


def _count(written: int, chunk: bytes, max_bytes: int) -> int:
    written += len(chunk)
    if written > max_bytes:
        raise UploadTooLarge(f"the upload exceeds {max_bytes} bytes",
                             allowed=f"at most {max_bytes} bytes")
    return written


def spool(chunks: Iterable[bytes], path: Path, *, max_bytes: int) -> Path:
    """Write a request body to ``path`` chunk by chunk (memory: one chunk).

    Raises:
        UploadTooLarge: more than ``max_bytes`` arrived (a 413; the partial file is left for
            the caller's temporary directory to remove).
    """
    written = 0
    with path.open("wb") as f:
        for chunk in chunks:
            written = _count(written, chunk, max_bytes)
            f.write(chunk)
    return path


async def spool_async(chunks: AsyncIterable[bytes], path: Path, *, max_bytes: int) -> Path:
    """``spool`` for an ASGI body (``request.stream()``)."""
    written = 0
    with path.open("wb") as f:
        async for chunk in chunks:
            written = _count(written, chunk, max_bytes)
            f.write(chunk)
    return path


def ingest_file(path: Path, *, media_type: str, schema: DatasetSchema) -> IngestedTable:
    """Validate the table at ``path`` against ``schema`` and return its arrays.

    Raises:
        InvalidRequest: the schema breaks a rule, or the media type is not readable.
        TableInvalid: the table breaks the schema (nothing is kept).
    """
    check_schema(schema)
    media = media_type_of(media_type)
    if media == PARQUET:
        return _validate(schema, lambda log, skipped: _parquet_batches(path, schema, log))
    try:
        return _validate(schema, lambda log, skipped: _csv_batches(
            path, schema, log, skipped, as_bytes=False), first_try=True)
    except pa.ArrowInvalid:  # text where Arrow wanted a number, or bad UTF-8: find the rows
        return _validate(schema, lambda log, skipped: _csv_batches(
            path, schema, log, skipped, as_bytes=True))


def _header_errors(names: list[str], schema: DatasetSchema, log: ErrorLog) -> None:
    expected = schema.columns
    listed = ", ".join(expected)
    for name in sorted({n for n in names if names.count(n) > 1}):
        log.add("column appears more than once", "each column once", column=name)
    for name in [c for c in expected if c not in names]:
        log.add("missing column", f"the columns {listed}", column=name)
    for name in [n for n in names if n not in expected]:
        log.add("unexpected column", f"the columns {listed}", column=name)


def _csv_header(path: Path, schema: DatasetSchema, log: ErrorLog) -> None:
    with path.open("rb") as f:
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


def _csv_batches(path: Path, schema: DatasetSchema, log: ErrorLog, skipped: list[int], *,
                 as_bytes: bool) -> Iterator[pa.RecordBatch]:
    _csv_header(path, schema, log)
    if log:
        log.complete = False
        return

    def bad_row(row: Any) -> str:
        # Serial reading (use_threads=False) gives the physical line; values never span lines.
        skipped.append(row.number - 1)
        log.add(f"{row.actual_columns} fields instead of {row.expected_columns}",
                f"{row.expected_columns} comma-separated fields", rows=np.array([row.number - 1]))
        return "skip"

    reader = pa_csv.open_csv(
        path,
        read_options=pa_csv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
        parse_options=pa_csv.ParseOptions(delimiter=",", invalid_row_handler=bad_row),
        convert_options=pa_csv.ConvertOptions(
            column_types=_csv_types(schema, as_bytes=as_bytes), null_values=[""],
            strings_can_be_null=True, include_columns=schema.columns),
    )
    yield from reader


def _parquet_batches(path: Path, schema: DatasetSchema,
                     log: ErrorLog) -> Iterator[pa.RecordBatch]:
    try:
        table = pq.ParquetFile(path)
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
    yield from table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=schema.columns)


def _readable(kind: pa.DataType) -> bool:
    return any(test(kind) for test in (
        pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_decimal,
        pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_null))


class _Columns:
    """The validated batches, kept only while the table has no error (all or nothing)."""

    def __init__(self, schema: DatasetSchema) -> None:
        self.schema, self.n_rows, self.positives = schema, 0, 0
        self.features: list[np.ndarray] = []
        self.outcome: list[np.ndarray] = []
        self.hashes: list[np.ndarray] = []  # per batch, while its columns are in cache
        self.attributes: dict[str, list[np.ndarray]] = {a.name: [] for a in schema.attributes}
        self.id_chunks: list[pa.Array] = []
        self.imputed = dict.fromkeys(schema.feature_names, 0)

    def add(self, batch: CheckedBatch, log: ErrorLog) -> None:
        self.n_rows += len(batch.outcome)
        if log:  # nothing will be kept: free what was
            for blocks in (self.features, self.outcome, self.hashes, self.id_chunks,
                           *self.attributes.values()):
                blocks.clear()
            return
        self.features.append(batch.features)
        self.outcome.append(batch.outcome)
        self.positives += int(np.count_nonzero(batch.outcome))
        self.hashes.append(row_hashes(self.schema, batch.features, batch.outcome,
                                      batch.attributes))
        for name, codes in batch.attributes.items():
            self.attributes[name].append(codes)
        if batch.ids is not None:
            self.id_chunks.append(batch.ids)
        for name, count in batch.imputed.items():
            self.imputed[name] += count

    def ids(self) -> pa.ChunkedArray:
        if self.schema.id_column is None:  # 1-based row numbers
            return pa.chunked_array([pa.array(np.arange(1, self.n_rows + 1)).cast(pa.string())])
        return pa.chunked_array(self.id_chunks, pa.string())


def _drain(blocks: list[np.ndarray]) -> np.ndarray:
    """Concatenate, freeing each block once copied: the peak is the result and one block."""
    out = np.empty((sum(len(b) for b in blocks), *blocks[0].shape[1:]), blocks[0].dtype)
    at = 0
    blocks.reverse()
    while blocks:
        block = blocks.pop()
        out[at:at + len(block)] = block
        at += len(block)
    return out


def _read(schema: DatasetSchema, batches: Iterator[pa.RecordBatch], log: ErrorLog,
          skipped: list[int]) -> _Columns:
    kept = _Columns(schema)
    for batch in batches:
        if kept.n_rows + batch.num_rows > MAX_ROWS:
            log.add(f"more than {MAX_ROWS} rows", f"at most {MAX_ROWS} rows")
            log.complete = False
            break
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        kept.add(check_batch(schema, columns, BatchRows(kept.n_rows, skipped), log), log)
    return kept


def _duplicate_ids(ids: pa.ChunkedArray, column: str, log: ErrorLog) -> None:
    """Sort and compare neighbours (faster than hashing strings in Arrow)."""
    order = pc.sort_indices(ids)
    ordered = ids.take(order)
    same = pc.equal(ordered[1:], ordered[:-1]).to_numpy()
    if same.any():
        pairs = np.flatnonzero(same)
        positions = order.to_numpy()[np.concatenate([pairs, pairs + 1])]
        log.add("duplicate id", "a unique id per row", column=column,
                rows=1 + np.unique(positions))


def _table_errors(schema: DatasetSchema, kept: _Columns, log: ErrorLog) -> None:
    if kept.n_rows == 0 and log.complete:
        log.add("no data rows", "at least one row")
    if log:
        return
    if schema.id_column is not None:
        _duplicate_ids(kept.ids(), schema.id_column, log)
    if kept.positives in (0, kept.n_rows):
        log.add("the outcome has a single class", "both 0 and 1", column=schema.outcome.name)


def _validate(schema: DatasetSchema, open_batches: Callable[..., Iterator[pa.RecordBatch]], *,
              first_try: bool = False) -> IngestedTable:
    """Read, check and assemble; ``first_try``: let Arrow's conversion errors propagate (the
    caller reads the CSV again to name the rows), else they are the table's error."""
    log = ErrorLog()
    skipped: list[int] = []  # CSV lines dropped for a wrong number of fields
    try:
        kept = _read(schema, open_batches(log, skipped), log, skipped)
    except (pa.ArrowInvalid, OSError) as exc:
        if first_try and isinstance(exc, pa.ArrowInvalid):
            raise
        log.add("the file could not be parsed (a broken quote, or a damaged file)",
                "a well-formed file")
        log.complete = False
        raise TableInvalid(log) from None
    _table_errors(schema, kept, log)
    if log:
        raise TableInvalid(log)
    return _assemble(schema, kept)


def _assemble(schema: DatasetSchema, kept: _Columns) -> IngestedTable:
    ids = kept.ids().to_numpy()
    kept.id_chunks.clear()
    return IngestedTable(
        features=_drain(kept.features), outcome=_drain(kept.outcome), ids=ids,
        attributes={name: _drain(blocks) for name, blocks in kept.attributes.items()},
        imputed=kept.imputed, fingerprint=fingerprint_of(_drain(kept.hashes)),
    )
