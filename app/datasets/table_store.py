"""A validated table: its arrays, its content fingerprint, and its content-addressed file.

The fingerprint is the data's identity (one budget per population, DESIGN.md "Data identity"):
it depends on the multiset of rows, never on their order or the ids, so the same patients
uploaded shuffled, re-keyed, or once as CSV and once as Parquet give the same fingerprint. Each
row hashes to 64 bits (keyed by its column names, categories by their text, so declaring
columns or categories in another order changes nothing); the sorted row hashes are hashed with
SHA-256. Two different populations collide only by accident, at odds near n^2 / 2^65 (1e-7 for
two million rows); editing any value gives a new fingerprint, as with any content hash.

The stored file is Parquet named by the SHA-256 of its bytes (``<data_dir>/<sha256>.parquet``),
written row group by row group as an upload is validated (``TableWriter``) to a temporary file
and renamed at the end, so a reader never sees half a table. Its footer's metadata holds the
schema hash, the fingerprint and the imputation counts, so a load gives back exactly what
ingestion returned.
"""

import hashlib
import json
import os
import tempfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.dataset_schema import DatasetSchema, FeatureKind, schema_hash
from app.datasets.record_coins import mix64

ID_COLUMN = "_id"
_META = b"dpcrisis"
_FINGERPRINT_VERSION = b"dpcrisis-table-v1\0"
ROW_GROUP_ROWS = 1 << 17


@dataclass(frozen=True, eq=False)
class IngestedTable:
    """A table that passed every rule of its schema."""

    features: np.ndarray  # (n, p) float64 in schema order; categoricals as category codes
    outcome: np.ndarray  # (n,) float64: 1 where the outcome equals the schema's ``positive``
    ids: pa.StringArray  # (n,): the id column, or "1".."n" (row numbers); kept in Arrow
    attributes: dict[str, np.ndarray]  # subgroup-only columns: name -> (n,) int64 codes
    imputed: dict[str, int]  # feature -> values imputed with its reference
    fingerprint: str  # order-insensitive content hash (hex SHA-256)

    @property
    def n_rows(self) -> int:
        return len(self.outcome)


@dataclass(frozen=True)
class StoredTable:
    sha256: str
    path: Path


def _key(text: str) -> np.uint64:
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"dpcrisis-col").digest()
    return np.uint64(int.from_bytes(digest, "little"))


def _bits(values: np.ndarray) -> np.ndarray:
    return (values + 0.0).view(np.uint64)  # a fresh array; -0.0 becomes 0.0


def _category_bits(name: str, categories: list[str], codes: np.ndarray) -> np.ndarray:
    keys = np.array([_key(f"{name}={category}") for category in categories], dtype=np.uint64)
    return keys[codes.astype(np.int64)]


def row_hashes(schema: DatasetSchema, features: np.ndarray, outcome: np.ndarray,
               attributes: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's 64-bit hash: independent of column order, categories by their text."""
    rows = np.zeros(len(outcome), dtype=np.uint64)
    for j, feature in enumerate(schema.features):
        if feature.kind is FeatureKind.CATEGORICAL:
            bits = _category_bits(feature.name, feature.categories or [], features[:, j])
        else:
            bits = _bits(features[:, j])
        rows += mix64(bits ^ _key(feature.name))
    for attribute in schema.attributes:
        bits = _category_bits(attribute.name, attribute.categories, attributes[attribute.name])
        rows += mix64(bits ^ _key(attribute.name))
    rows += mix64(_bits(outcome) ^ _key(schema.outcome.name))
    return mix64(rows)


def fingerprint_of(hashes: np.ndarray) -> str:
    """SHA-256 of the sorted row hashes: the multiset of rows, not their order."""
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    digest.update(len(hashes).to_bytes(8, "little"))
    digest.update(np.sort(hashes).astype("<u8").tobytes())
    return digest.hexdigest()


def fingerprint(schema: DatasetSchema, features: np.ndarray, outcome: np.ndarray,
                attributes: dict[str, np.ndarray]) -> str:
    """Order-insensitive content fingerprint of a table (ids excluded: see the module doc)."""
    return fingerprint_of(row_hashes(schema, features, outcome, attributes))


def arrow_schema(schema: DatasetSchema) -> pa.Schema:
    """The stored file's columns: the id, the features (float64), attributes, the outcome."""
    return pa.schema(
        [(ID_COLUMN, pa.string())]
        + [(name, pa.float64()) for name in schema.feature_names]
        + [(a.name, pa.int64()) for a in schema.attributes]
        + [(schema.outcome.name, pa.int8())])


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
        os.fsync(f.fileno())
    return digest.hexdigest()


class TableWriter:
    """Writes a table's rows as they are validated, to a temporary file in ``data_dir``;
    ``finish`` names it by its bytes' SHA-256 (atomic rename), ``discard`` removes it.

    Each checked batch goes to a writer thread, which converts it to Arrow and writes a row
    group whenever ``ROW_GROUP_ROWS`` rows have come: Parquet's encoding and compression run
    beside the reading and the checks, without the GIL. At most ``MAX_QUEUED`` batches wait,
    so memory is a few batches and a row group whatever the table's size. The metadata
    (schema hash, fingerprint, imputation counts) is known only at the end and goes into the
    file's footer.
    """

    MAX_QUEUED = 4

    def __init__(self, schema: DatasetSchema, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=data_dir, prefix=".upload-", suffix=".parquet.tmp")
        os.close(fd)
        self.schema, self.data_dir, self.path = schema, data_dir, Path(name)
        self._arrow = arrow_schema(schema)
        # No dictionary for the ids (all distinct: it is built, then dropped) and no column
        # statistics (a table is always read whole): a quarter less encoding, a smaller file.
        self._writer = pq.ParquetWriter(
            self.path, self._arrow, compression="zstd", write_statistics=False,
            use_dictionary=[name for name in self._arrow.names if name != ID_COLUMN])
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="table-writer")
        self._queued: deque[Future[None]] = deque()

    def write(self, ids: pa.Array, features: np.ndarray, outcome: np.ndarray,
              attributes: dict[str, np.ndarray]) -> None:
        """Queue a checked batch (raises here if an earlier one failed to be written)."""
        while len(self._queued) >= self.MAX_QUEUED:
            self._queued.popleft().result()
        self._queued.append(self._thread.submit(self._take, ids, features, outcome, attributes))

    def _take(self, ids: pa.Array, features: np.ndarray, outcome: np.ndarray,
              attributes: dict[str, np.ndarray]) -> None:
        columns = [ids.cast(pa.string())]
        columns += [pa.array(features[:, j]) for j in range(features.shape[1])]
        columns += [pa.array(attributes[a.name], pa.int64()) for a in self.schema.attributes]
        columns.append(pa.array(outcome.astype(np.int8)))
        self._pending.append(pa.record_batch(columns, schema=self._arrow))
        self._pending_rows += len(outcome)
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._write_group()

    def _write_group(self) -> None:
        if self._pending:
            group = pa.Table.from_batches(self._pending)
            self._writer.write_table(group, row_group_size=max(group.num_rows, 1))
        self._pending, self._pending_rows = [], 0

    def flush(self) -> None:
        """Queue the last rows' row group (``wait`` or ``finish`` waits for it)."""
        self._queued.append(self._thread.submit(self._write_group))

    def wait(self) -> None:
        """Until every queued batch is written (raises the first failure)."""
        while self._queued:
            self._queued.popleft().result()

    def finish(self, *, fingerprint: str, imputed: dict[str, int]) -> StoredTable:
        meta = {"schema_hash": schema_hash(self.schema), "fingerprint": fingerprint,
                "imputed": imputed}
        try:
            self.flush()
            self.wait()
            self._writer.add_key_value_metadata({_META.decode(): json.dumps(meta)})
            self._writer.close()
            sha = _file_sha256(self.path)
            final = self.data_dir / f"{sha}.parquet"
            os.replace(self.path, final)
        finally:
            self._thread.shutdown(wait=True)
            self.path.unlink(missing_ok=True)
        return StoredTable(sha256=sha, path=final)

    def discard(self) -> None:
        self._pending = []
        try:
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._writer.close()
        finally:
            self.path.unlink(missing_ok=True)


def store(table: IngestedTable, *, schema: DatasetSchema, data_dir: Path) -> StoredTable:
    """Write the table as ``<data_dir>/<sha256>.parquet`` (atomically; idempotent)."""
    writer = TableWriter(schema, data_dir)
    try:
        writer.write(table.ids, table.features, table.outcome, table.attributes)
    except BaseException:
        writer.discard()
        raise
    return writer.finish(fingerprint=table.fingerprint, imputed=table.imputed)


def load(path: Path, *, schema: DatasetSchema, verify: bool = True) -> IngestedTable:
    """Read a stored table back to the arrays ingestion returned.

    Raises:
        ValueError: the file's bytes do not match its name (``verify``), or it was stored
            under another schema.
    """
    if verify and _file_sha256(path) != path.stem:
        raise ValueError(f"{path.name}: contents do not match the name (corrupt or edited)")
    data = pq.read_table(path)
    footer = pq.read_metadata(path).metadata or {}
    meta = json.loads(footer.get(_META, b"{}"))
    if meta.get("schema_hash") != schema_hash(schema):
        raise ValueError(f"{path.name} was stored under another schema")
    features = np.empty((data.num_rows, len(schema.features)))
    for j, name in enumerate(schema.feature_names):
        features[:, j] = data.column(name).to_numpy()
    return IngestedTable(
        features=features,
        outcome=data.column(schema.outcome.name).to_numpy().astype(np.float64),
        ids=data.column(ID_COLUMN).combine_chunks().cast(pa.string()),
        attributes={a.name: data.column(a.name).to_numpy().astype(np.int64)
                    for a in schema.attributes},
        imputed=meta["imputed"],
        fingerprint=meta["fingerprint"],
    )
