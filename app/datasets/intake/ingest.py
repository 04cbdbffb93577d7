"""Read an uploaded table against its declared schema: streamed, bounded memory, all or nothing.

Formats (``app.datasets.intake.table_readers``): ``text/csv`` (UTF-8, a byte order mark dropped;
comma-separated unless the request's Content-Type declares another dialect,
``app.datasets.intake.table_format``; a header row naming every column of the schema exactly once,
order free, no other column; an empty cell is a missing value; a value cannot span lines) and
``application/vnd.apache.parquet`` (bounded from its page headers before anything is decoded,
``app.datasets.intake.parquet_limits``). Both are read in batches (1 MiB of CSV, 64k Parquet rows),
each checked before the next is read. ``ingest_and_store`` (an upload's ingest) keeps
nothing of a checked batch but its row hashes and id words, so memory is the ids, two
64-bit words per row and a few batches, whatever the number of columns; once the caller's
own checks pass, the file itself is kept as sent (``table_store.keep_as_sent``).
``ingest_file`` returns the arrays (loading a kept table, tests, benches).

CSV is read twice only when it is invalid: the fast pass lets Arrow parse numbers with explicit
column types; if Arrow meets text it cannot convert, the file is read again with every column
as bytes, and each value is classified (number, NaN/infinity, text, bad UTF-8) to name its row.
Blank lines are skipped and not counted as rows.

Errors: every rule broken in the file, in one pass: the first 100 in reading order, each
``{"row", "column", "message", "allowed"}`` with ``row`` the 1-based data row (header excluded;
null for the header and table-wide rules), and the exact ``total``; ``complete`` is true only
when the list is every error there is. ``total`` is a lower bound when reading stopped early: at
the batch that crosses 2,000,000 rows, before the rows when the header (or the Parquet schema)
does not match, or at a file that cannot be parsed. Duplicate ids, zero rows and a single
outcome class are checked once all rows are read, whatever else broke (an id that broke its own
rules is not compared; a single class among the valid outcomes is undecided when others were
invalid, and ``complete`` is then false);
ids are compared in their canonical text for the schema's ``id_kind``
(``app.datasets.intake.id_rules``). An unlabelled follow-up's table is read under
``dataset_schema.FeaturesOnly``: no outcome column (one is refused by name), the outcome read back
as NaN, no single-class rule.
"""

from collections import Counter
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from app.core.errors import InvalidRequest
from app.datasets import record_coins
from app.datasets.intake import projection, table_readers, table_store
from app.datasets.intake.ingest_checks import BatchRows, CheckedBatch, ErrorLog, check_batch
from app.datasets.intake.table_format import CSV, PARQUET, TableFormat, media_type_of
from app.datasets.intake.table_readers import Source
from app.datasets.intake.table_store import IngestedTable, StoredTable, fingerprint_of, row_hashes
from app.datasets.intake.text_values import nulls
from app.datasets.schema.checks import check_schema
from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schemas import MAX_ROWS

SUFFIXES = {CSV: ".csv", PARQUET: ".parquet"}  # in the default dialect: see TableFormat.suffix
MediaType = str | TableFormat
"""``text/csv; delimiter=";"`` as sent, or the format ``media_type_of`` read from it."""
IdDigest = Callable[[pa.StringArray | record_coins.IdBlocks], np.ndarray]
"""A 64-bit word per id, equal for equal ids (duplicates are then confirmed by text); an
upload's batch comes laid out once (``record_coins.IdBlocks``) for each of its digests."""
IdColumn: TypeAlias = pa.StringArray | pa.ChunkedArray
"""An upload's ids: its batches' arrays as they came (``ingest_and_store``: never copied into
one), or one array (``ingest_file``)."""


@dataclass(frozen=True)
class PendingUpload:
    """A validated upload, not yet kept: ``commit`` keeps its file as sent, named by its
    bytes, once the caller's own checks passed (``app.datasets.uploads``); until then nothing
    is in the data directory."""

    n_rows: int
    ids: IdColumn
    imputed: dict[str, int]
    fingerprint: str
    id_words: np.ndarray  # (n,) uint64: ``id_digest`` of each id
    source: Source
    media_type: str  # text/csv or application/vnd.apache.parquet (no parameters)
    data_dir: Path
    sha256: str  # of the file's bytes: its name once kept
    format: TableFormat  # the media type and its CSV dialect: part of the kept file's name
    patient_words: np.ndarray | None = None  # ``patient_digest`` of the ids, sorted, when asked
    ignored: tuple[str, ...] = ()  # the file's columns the schema ignores (not in ``source``)

    def commit(self, *, link: bool = False) -> StoredTable:
        """Keep the file (``link``: hard-linked, for a spool nobody writes again)."""
        return table_store.keep_as_sent(self.source, suffix=self.format.suffix,
                                        data_dir=self.data_dir, sha256=self.sha256, link=link)


class TableInvalid(InvalidRequest):
    """The table breaks its schema: a 422 listing the errors (``errors``, ``total``)."""

    kind, title = "invalid-table", "Invalid table"

    def __init__(self, log: ErrorLog) -> None:
        log.flush()
        more = "" if log.complete else " (or more: not every row or rule could be checked)"
        super().__init__(
            f"the table breaks its schema in {log.total} place(s){more}; nothing was stored",
            errors=log.items, total=log.total, complete=log.listed_all,
        )


def ingest_file(path: Path, *, media_type: MediaType, schema: DatasetSchema) -> IngestedTable:
    """Validate the table at ``path`` against ``schema`` and return its arrays.

    Raises:
        InvalidRequest: the schema breaks a rule, or the media type is not readable.
        TableInvalid: the table breaks the schema (nothing is kept).
    """
    kept = _ingest(path, media_type, schema, lambda: _Columns(schema, True))
    return IngestedTable(
        features=_drain(kept.features), outcome=_drain(kept.outcome), ids=kept.ids(),
        attributes={name: _drain(blocks) for name, blocks in kept.attributes.items()},
        imputed=kept.imputed, fingerprint=kept.fingerprint,
    )


def ingest_and_store(path: Source, *, media_type: MediaType, schema: DatasetSchema,
                     data_dir: Path, sha256: str | None = None,
                     id_digest: IdDigest = record_coins.id_digests,
                     patient_digest: IdDigest | None = None) -> PendingUpload:
    """Validate the table at ``path`` keeping only each row's hash and id: the rows are never
    all in memory at once. The caller commits it (kept in ``data_dir`` as sent, named by its
    bytes: ``sha256``, taken here when the caller has not) or drops it (nothing was written).

    ``id_digest`` gives each id a 64-bit word, equal for equal ids, to find duplicates; the
    upload passes the dataset's keyed coin words, which come back as ``id_words`` so the
    parts need no second pass over the ids. ``patient_digest`` (the organisation's patient
    key, ``app.datasets.patients.patient_index``) is taken the same way, batch by batch, and comes
    back as ``patient_words``, sorted: the accept then only merges.

    Raises:
        InvalidRequest: the schema breaks a rule, or the media type is not readable.
        TableInvalid: the table breaks the schema (nothing is stored).
    """
    fmt = media_type_of(media_type)
    kept = _ingest(path, fmt, schema, lambda: _Columns(schema, False, id_digest,
                                                       patient_digest=patient_digest))
    if kept.ignored:  # what is kept is the schema's columns only
        path = projection.project(path, fmt, schema)
        sha256 = table_store.file_sha256(path)
    return PendingUpload(n_rows=kept.n_rows, ids=kept.ids(), imputed=kept.imputed,
                         fingerprint=kept.fingerprint, id_words=kept.id_words(),
                         source=path, media_type=fmt.media_type, data_dir=data_dir,
                         sha256=sha256 or table_store.file_sha256(path), format=fmt,
                         patient_words=kept.patient_words(), ignored=tuple(kept.ignored))


def _ingest(path: Source, media_type: MediaType, schema: DatasetSchema,
            columns: Callable[[], "_Columns"]) -> "_Columns":
    check_schema(schema)
    fmt = media_type_of(media_type)
    if fmt.media_type == PARQUET:
        return _validate(schema, lambda log, skipped, ignored: table_readers.parquet_batches(
            path, schema, log, ignored), columns)
    try:
        return _validate(schema, lambda log, skipped, ignored: table_readers.csv_batches(
            path, schema, log, skipped, as_bytes=False, fmt=fmt, ignored=ignored), columns,
            first_try=True, decimal=fmt.decimal)
    except pa.ArrowInvalid:  # text where Arrow wanted a number, or bad UTF-8: find the rows
        return _validate(schema, lambda log, skipped, ignored: table_readers.csv_batches(
            path, schema, log, skipped, as_bytes=True, fmt=fmt, ignored=ignored), columns,
            decimal=fmt.decimal)


class _Columns:
    """What is kept of the validated batches while the table has no error (all or nothing):
    every batch's row hashes and ids, and (``keep_rows``) its values."""

    def __init__(self, schema: DatasetSchema, keep_rows: bool,
                 id_digest: IdDigest = record_coins.id_digests,
                 patient_digest: IdDigest | None = None) -> None:
        self.schema, self.keep_rows, self.n_rows = schema, keep_rows, 0
        self.positives = self.negatives = 0  # valid outcomes of each class
        self.id_digest, self.patient_digest = id_digest, patient_digest
        self.patient_chunks: list[np.ndarray] = []
        self.patient_array = np.zeros(0, np.uint64)  # patient_words(), once joined
        self.fingerprint = ""  # set once every row passed
        self.words: np.ndarray | None = None  # id_words(), once built
        self.word_chunks: list[np.ndarray] = []  # without the rows: each batch's id words
        self.features: list[np.ndarray] = []
        self.outcome: list[np.ndarray] = []
        self.hashes: list[np.ndarray] = []  # per batch, while its columns are in cache
        self.attributes: dict[str, list[np.ndarray]] = {a.name: [] for a in schema.attributes}
        self.id_chunks: list[pa.Array] = []
        self.id_array: IdColumn | None = None
        self.imputed = dict.fromkeys(schema.feature_names, 0)
        self.ignored: list[str] = []  # the header's columns the schema ignores

    def add(self, batch: CheckedBatch, log: ErrorLog) -> None:
        first, self.n_rows = self.n_rows, self.n_rows + len(batch.outcome)
        self.positives += int(np.count_nonzero(batch.outcome == 1))
        self.negatives += int(np.count_nonzero(batch.outcome == 0))
        if batch.ids is not None:  # kept even once the table has errors: duplicates are too
            self.id_chunks.append(batch.ids)
        if log:  # no row will be kept: free what was, but the ids
            for blocks in (self.features, self.outcome, self.hashes, self.word_chunks,
                           self.patient_chunks, *self.attributes.values()):
                blocks.clear()
            return
        for name, count in batch.imputed.items():
            self.imputed[name] += count
        self.hashes.append(row_hashes(self.schema, batch.features, batch.outcome,
                                      batch.attributes))
        if not self.keep_rows:
            ids = batch.ids if batch.ids is not None else _row_numbers(first, self.n_rows)
            laid = record_coins.IdBlocks.of(ids.cast(pa.string()))  # once for both digests
            self.word_chunks.append(self.id_digest(laid))
            if self.patient_digest is not None:
                self.patient_chunks.append(self.patient_digest(laid))
            return
        self.features.append(batch.features)
        self.outcome.append(batch.outcome)
        for name, codes in batch.attributes.items():
            self.attributes[name].append(codes)

    def id_words(self) -> np.ndarray:
        """``id_digest`` of every id, in order (built once): taken batch by batch while the
        next batch was being read, or (with the rows kept) all at once here."""
        if self.words is None:
            if self.keep_rows:
                self.words = self.id_digest(self.ids())
            else:
                self.words = (np.concatenate(self.word_chunks) if self.word_chunks
                              else np.zeros(0, np.uint64))
            self.word_chunks.clear()
        return self.words

    def patient_words(self) -> np.ndarray | None:
        """``patient_digest`` of every id (None: not asked, or the rows kept): in row order,
        or sorted once the duplicate check has sorted them (``_table_errors``)."""
        if self.patient_digest is None or self.keep_rows:
            return None
        if self.patient_chunks:
            self.patient_array = np.concatenate(self.patient_chunks)
            self.patient_chunks.clear()
        return self.patient_array

    def ids(self) -> IdColumn:
        """The id column (built once; the id chunks are then freed): one array with the rows
        kept, else the batches' arrays as they came (an upload only compares or keys them, so
        joining them into one array would only add work at the end of every upload)."""
        if self.id_array is None:
            if self.schema.id_column is None:
                self.id_array = _row_numbers(0, self.n_rows)
            else:
                chunked = pa.chunked_array(self.id_chunks, pa.string())
                self.id_array = chunked.combine_chunks() if self.keep_rows else chunked
            self.id_chunks.clear()
        return self.id_array


def _row_numbers(start: int, stop: int) -> pa.StringArray:
    """The 1-based numbers of kept rows ``start + 1 .. stop``, as ids (no id column)."""
    return pa.array(np.arange(start + 1, stop + 1)).cast(pa.string())


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


def _read(kept: _Columns, batches: Iterator[pa.RecordBatch], log: ErrorLog,
          skipped: list[int], decimal: str) -> None:
    for batch in batches:
        if kept.n_rows + batch.num_rows > MAX_ROWS:
            log.add(f"more than {MAX_ROWS} rows", f"at most {MAX_ROWS} rows")
            log.complete = False
            break
        columns = dict(zip(batch.schema.names, batch.columns, strict=True))
        kept.add(check_batch(kept.schema, columns, BatchRows(kept.n_rows, skipped), log,
                             decimal=decimal), log)


def _duplicate_ids(ids: IdColumn, digests: np.ndarray, column: str, log: ErrorLog,
                   numbers: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Equal 64-bit id digests first (a sort of words, not of strings); only ids whose digest
    repeats are compared as text, so an accidental digest collision is never an error.
    ``numbers`` gives the data rows of positions in ``ids``. The digests come back sorted."""
    ordered = np.sort(digests)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(repeated):
        return ordered
    candidates = np.flatnonzero(np.isin(digests, repeated))
    texts = ids.take(pa.array(candidates)).to_pylist()
    counts = Counter(texts)
    rows = candidates[[counts[text] > 1 for text in texts]]
    if len(rows):
        log.add("duplicate id", "a unique id per row", column=column, rows=numbers(rows))
    return ordered


def _duplicates_among_errors(kept: _Columns, column: str, log: ErrorLog,
                             skipped: list[int]) -> None:
    """Duplicate ids in a table that already broke other rules: its ids that passed their own
    rules (the others are null), compared by their unkeyed digests."""
    if not kept.id_chunks:
        return
    ids = pa.chunked_array(kept.id_chunks, pa.string()).combine_chunks()
    present = np.flatnonzero(~nulls(ids))
    valid = ids.take(pa.array(present))
    rows = BatchRows(0, skipped)
    _duplicate_ids(valid, record_coins.id_digests(valid), column, log,
                   lambda at: rows.numbers(present[at]))


def _single_class(schema: DatasetSchema, kept: _Columns, log: ErrorLog) -> None:
    """Both outcome classes; undecided (``log.complete`` false) when the outcomes sent in one
    class are not all the rows: the invalid ones, once corrected, may hold the other."""
    if not schema.labelled or not kept.n_rows or (kept.positives and kept.negatives):
        return
    if kept.positives + kept.negatives == kept.n_rows:
        log.add("the outcome has a single class", "both 0 and 1", column=schema.outcome.name)
    else:
        log.complete = False


def _table_errors(schema: DatasetSchema, kept: _Columns, log: ErrorLog,
                  skipped: list[int]) -> None:
    """The rules over all rows, checked whatever else broke, once every row was read."""
    if kept.n_rows == 0 and log.complete:
        log.add("no data rows", "at least one row")
    if not log.complete:  # reading stopped early: rows were never read
        return
    if schema.id_column is not None and log:
        _duplicates_among_errors(kept, schema.id_column, log, skipped)
    elif schema.id_column is not None:
        # The patient words when the upload has them (any keyed digest finds repeats): the
        # accept then merges them without a sort of its own (``patient_index.add_dataset``).
        patients = kept.patient_words()
        first = BatchRows(0).numbers
        if patients is not None and len(patients) == kept.n_rows:
            kept.patient_array = _duplicate_ids(kept.ids(), patients, schema.id_column, log,
                                                first)
        else:
            _duplicate_ids(kept.ids(), kept.id_words(), schema.id_column, log, first)
    _single_class(schema, kept, log)


Batches = Generator[pa.RecordBatch, None, None]


def _validate(schema: DatasetSchema, open_batches: Callable[..., Batches],
              columns: Callable[[], "_Columns"], *, first_try: bool = False,
              decimal: str = ".") -> "_Columns":
    """Read and check every batch, then the table-wide rules; the kept columns come back with
    their fingerprint. ``first_try``: let Arrow's conversion errors propagate (the caller
    reads the CSV again to name the rows), else they are the table's error."""
    log = ErrorLog()
    skipped: list[int] = []  # CSV lines dropped for a wrong number of fields
    kept = columns()
    batches = open_batches(log, skipped, kept.ignored)
    try:
        _read(kept, batches, log, skipped, decimal)
    except (pa.ArrowInvalid, OSError) as exc:
        if first_try and isinstance(exc, pa.ArrowInvalid):
            raise
        log.add(*table_readers.unreadable(exc))
        log.complete = False
        raise TableInvalid(log) from None
    finally:
        batches.close()  # stops the reading thread at once, whatever happened
    with ThreadPoolExecutor(1, thread_name_prefix="fingerprint") as pool:
        # Sorting releases the GIL: the row hashes sort beside the ids' sort.
        fingerprint = pool.submit(lambda: fingerprint_of(_drain(kept.hashes))
                                  if kept.n_rows and not log else "")
        _table_errors(schema, kept, log, skipped)
        if log:
            raise TableInvalid(log)
        kept.fingerprint = fingerprint.result()
    return kept
