"""The table readers of an upload: CSV and Parquet, batch by batch.

Formats: ``text/csv`` (UTF-8, a byte order mark allowed and dropped; comma-separated unless
the request declares another dialect, ``app.datasets.intake.table_format``; a header row naming
every column of the schema exactly once, order free, no other column; an empty cell is a missing
value; a value cannot span lines) and ``application/vnd.apache.parquet`` (an id column of
``id_kind`` integer as integers or text). Both are read in batches (1 MiB of CSV, 64k Parquet
rows), each checked before the next is read (``app.datasets.intake.ingest``). Ids are read as text
here and made canonical for their kind by the checks (``app.datasets.intake.id_rules``).

A header (or Parquet schema) that does not match the declared schema is logged and nothing is
read; so is a header over ``settings.upload_max_header_bytes`` or
``settings.upload_max_columns``, and a Parquet file whose page headers show it would decode to
more than the upload limits (``app.datasets.intake.parquet_limits``). A CSV line with a wrong number
of fields is dropped and logged with its physical line (Arrow's serial parser knows it; values
never span lines); ``skipped`` lists those lines so the rows after them keep their numbers.
"""

import csv
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from app.core.settings import settings
from app.datasets.intake import parquet_limits
from app.datasets.intake.error_log import ErrorLog
from app.datasets.intake.table_format import CSV, PARQUET, TableFormat
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind
from app.datasets.schemas import MAX_ROWS

CSV_BLOCK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = parquet_limits.BATCH_ROWS
_BOM = b"\xef\xbb\xbf"
COMMA_SEPARATED = TableFormat(CSV)


def header_errors(names: list[str], schema: DatasetSchema, log: ErrorLog,
                  ignored: list[str] | None = None) -> None:
    """Each column of the schema exactly once, no other (linear in the header's length); a name
    that differs from a missing one only in case gets a "did you mean". Under the schema's
    ``extra_columns`` "ignore" any other column is added to ``ignored`` instead (but an
    unlabelled follow-up's outcome, and a did-you-mean, stay errors)."""
    if len(names) > settings.upload_max_columns:
        log.add(f"{len(names)} columns", f"at most {settings.upload_max_columns} columns "
                "(settings.upload_max_columns)")
        return
    expected = schema.columns
    listed = ", ".join(expected)
    present, declared = Counter(names), set(expected)
    ignoring = schema.extra_columns == "ignore"
    for name in sorted(n for n, count in present.items()
                       if count > 1 and (n in declared or not ignoring)):
        log.add("column appears more than once", "each column once", column=name)
    missing = [c for c in expected if c not in present]
    for name in missing:
        log.add("missing column", f"the columns {listed}", column=name)
    by_case = {name.casefold(): name for name in missing}
    for name in [n for n in present if n not in declared]:
        if name == schema.outcome.name:  # an unlabelled follow-up's table: features only
            log.add("an unlabelled follow-up carries no outcome column (register the "
                    "follow-up labelled to send outcomes)", f"the columns {listed}", column=name)
            continue
        hint = by_case.get(name.casefold())
        if ignoring and hint is None:
            if ignored is not None:
                ignored.append(name)
            continue
        did_you_mean = "" if hint is None else f": did you mean {hint!r}?"
        log.add(f"unexpected column{did_you_mean}", f"the columns {listed}", column=name)


Source = Path
"""A spooled (complete) upload, or a kept table."""


def _open(source: Source) -> BinaryIO:
    return source.open("rb")


_SEPARATORS = {",": "commas", ";": "semicolons", "\t": "tabs"}


def _read_header(source: Source, log: ErrorLog) -> bytes | None:
    """The first line without its BOM and line end; None (logged) when it is over the limit."""
    limit = settings.upload_max_header_bytes
    with _open(source) as f:
        start = f.read(len(_BOM) + limit + 2).removeprefix(_BOM)
    head, newline, _ = start.partition(b"\n")
    head = head.removesuffix(b"\r")
    if len(head) > limit or (not newline and len(start) > limit):
        log.add(f"the header line is longer than {limit} bytes",
                f"a header of at most {limit} bytes (settings.upload_max_header_bytes)")
        return None
    return head


def _csv_header(source: Source, schema: DatasetSchema, fmt: TableFormat, log: ErrorLog,
                ignored: list[str] | None) -> None:
    head = _read_header(source, log)
    if head is None:
        return
    if not head:
        log.add("the file is empty or its first line is blank", "a header row")
        return
    try:
        names = next(csv.reader([head.decode("utf-8")], delimiter=fmt.delimiter))
    except UnicodeDecodeError:
        log.add("the header is not valid UTF-8", "UTF-8 text")
        return
    except csv.Error as exc:  # the csv module's own limit on one field, or a stray quote
        limit = csv.field_size_limit()
        too_long = "field larger than field limit" in str(exc)
        log.add(f"a header field is longer than {limit} characters" if too_long
                else f"the header could not be parsed ({exc})",
                f"column names of at most {limit} characters" if too_long else "a header row")
        return
    others = [found for mark, found in _SEPARATORS.items()
              if len(names) == 1 and mark != fmt.delimiter and mark in names[0]]
    if others:  # one name holding another separator: the file's dialect is not the declared one
        declare = ('; declare another separator with Content-Type: text/csv; delimiter=";"'
                   if fmt.delimiter == "," else " (as the Content-Type declares)")
        log.add(f"the header is separated by {others[0]}", f"{fmt.describe()}{declare}")
        return
    header_errors(names, schema, log, ignored)


def _csv_types(schema: DatasetSchema, *, as_bytes: bool) -> dict[str, pa.DataType]:
    if as_bytes:
        return {name: pa.binary() for name in schema.columns}
    types = {f.name: pa.string() if f.kind is FeatureKind.CATEGORICAL else pa.float64()
             for f in schema.features}
    types |= {a.name: pa.string() for a in schema.attributes}
    if schema.labelled:
        types[schema.outcome.name] = pa.float64()
    if schema.id_column is not None:
        types[schema.id_column] = pa.string()
    return types


def csv_batches(source: Source, schema: DatasetSchema, log: ErrorLog, skipped: list[int], *,
                as_bytes: bool, fmt: TableFormat = COMMA_SEPARATED,
                ignored: list[str] | None = None) -> Generator[pa.RecordBatch, None, None]:
    """The CSV's batches, typed for the schema (``as_bytes``: every column as bytes, to name
    the rows of values Arrow cannot convert), in the request's dialect ``fmt``; the columns
    the schema ignores are named in ``ignored`` and never converted."""
    _csv_header(source, schema, fmt, log, ignored)
    if log:
        log.complete = False
        return

    def bad_row(row: Any) -> str:
        # Serial parsing (use_threads=False) gives the physical line; values never span lines.
        line, actual, expected = row.number - 1, row.actual_columns, row.expected_columns
        skipped.append(line)
        log.add(f"{actual} fields instead of {expected}",
                f"{expected} fields ({fmt.describe()})", rows=np.array([line]))
        return "skip"

    with _open(source) as body:
        reader = pa_csv.open_csv(
            body,
            read_options=pa_csv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
            parse_options=pa_csv.ParseOptions(delimiter=fmt.delimiter,
                                              invalid_row_handler=bad_row),
            convert_options=pa_csv.ConvertOptions(
                column_types=_csv_types(schema, as_bytes=as_bytes), null_values=[""],
                strings_can_be_null=True, include_columns=schema.columns,
                decimal_point=fmt.decimal),
        )
        while (batch := _next_or_none(reader)) is not None:
            yield batch


def unreadable(exc: Exception) -> tuple[str, str]:
    """The error (message, allowed) of a file Arrow could not parse."""
    if "straddling object" in str(exc):  # no line end within one block of Arrow's CSV reader
        return (f"a line longer than {CSV_BLOCK_BYTES} bytes (a huge value, or a quote never "
                "closed)", f"lines of at most {CSV_BLOCK_BYTES} bytes")
    return "the file could not be parsed (a broken quote, or a damaged file)", "a well-formed file"


def _next_or_none(reader: Any) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


def parquet_batches(source: Source, schema: DatasetSchema, log: ErrorLog,
                    ignored: list[str] | None = None) -> Generator[pa.RecordBatch, None, None]:
    """The Parquet file's batches, once its schema matches and its page headers show that
    reading it stays within the upload limits (``app.datasets.intake.parquet_limits``); the columns
    the schema ignores are named in ``ignored`` and never read."""
    path = source
    try:
        if not parquet_limits.footer_fits(path, log):
            log.complete = False
            return
        table = pq.ParquetFile(path, thrift_string_size_limit=parquet_limits.MAX_FOOTER_BYTES,
                               thrift_container_size_limit=parquet_limits.MAX_FOOTER_BYTES)
    except (pa.ArrowInvalid, OSError):
        log.add("not a Parquet file", PARQUET)
        log.complete = False
        return
    header_errors(table.schema_arrow.names, schema, log, ignored)
    for field in table.schema_arrow:
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if field.name in schema.columns and not _readable(kind):
            log.add(f"a column of type {kind} cannot be read", "numbers or text",
                    column=field.name)
        elif field.name == schema.id_column and not _id_readable(kind, schema.id_kind):
            log.add(f"an integer id column of type {kind}", "integers or text (a float or "
                    "decimal column cannot hold every whole number exactly)", column=field.name)
    if table.metadata.num_rows > MAX_ROWS:
        log.add(f"{table.metadata.num_rows} rows", f"at most {MAX_ROWS} rows")
    if not log:
        parquet_limits.check(path, table.metadata, schema.columns, log)
    if log:
        log.complete = False
        return
    yield from table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=schema.columns)


def _id_readable(kind: pa.DataType, id_kind: str) -> bool:
    """Whether an id column of Arrow type ``kind`` holds ids of the schema's ``id_kind``:
    integer ids come as integers or as text to read as whole numbers."""
    return id_kind != "integer" or not (pa.types.is_floating(kind) or pa.types.is_decimal(kind)
                                        or pa.types.is_boolean(kind))


def _readable(kind: pa.DataType) -> bool:
    return any(test(kind) for test in (
        pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_decimal,
        pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view,
        pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view,
        pa.types.is_null))
