"""A validated table: its arrays, its content fingerprint, and its stored file.

The fingerprint is the data's identity (one budget per population: docs/privacy.md, "Data
identity"): it depends on the multiset of rows, never on their order or the ids, so the same
patients uploaded shuffled, re-keyed, or once as CSV and once as Parquet give the same fingerprint.
Each row hashes to 64 bits (keyed by its column names, categories by their text, so declaring
columns or categories in another order changes nothing); the sorted row hashes are hashed with
SHA-256. Two different populations collide only by accident, at odds near n^2 / 2^65 (1e-7 for two
million rows); editing any value gives a new fingerprint, as with any content hash.

An upload is kept as the clinic sent it (``keep_as_sent``): ``<data_dir>/<sha256>.csv`` or
``.parquet``, named by the SHA-256 of its bytes, so the clinic can check with ``sha256sum`` that
the stored table is exactly its own file, and an erasure removes that one file. It is read back
through the validation that accepted it (``app.datasets.intake.stored``). Re-encoding the rows in a
layout of our own at upload would cost more CPU than all the checks together, in the request
(bench/ingest.py); the price is disk (a CSV is about 7 times its Parquet) and a re-parse at each
load, small next to the training that follows. Tables stored before migration 0014 are in that
layout (``load``): the ids, the features as float64, the outcome, metadata in the footer.
"""

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.record_coins import mix64
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, schema_hash

ID_COLUMN = "_id"
_META = b"dpcrisis"
_FINGERPRINT_VERSION = b"dpcrisis-table-v1\0"


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
    digest.update(np.sort(hashes).astype("<u8", copy=False).data)  # hashed where sorted
    return digest.hexdigest()


def fingerprint(schema: DatasetSchema, features: np.ndarray, outcome: np.ndarray,
                attributes: dict[str, np.ndarray]) -> str:
    """Order-insensitive content fingerprint of a table (ids excluded: see the module doc)."""
    return fingerprint_of(row_hashes(schema, features, outcome, attributes))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_bytes(path: Path) -> None:
    """Raises ValueError when the file's bytes do not match its name (corrupt or edited)."""
    if file_sha256(path) != path.name.split(".")[0]:
        raise ValueError(f"{path.name}: contents do not match the name (corrupt or edited)")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_as_sent(source: Path, *, sha256: str, suffix: str, data_dir: Path,
                 link: bool = False) -> StoredTable:
    """Keep the file at ``source`` (whose bytes hash to ``sha256``) as
    ``<data_dir>/<sha256><suffix>``, byte for byte.

    The file is copied (``link``: hard-linked, for a spool nobody writes again; copied across
    file systems) under a temporary name, flushed to disk, then renamed, so a reader never sees
    half a table and ``source`` stays where it is. Keeping the same bytes twice gives the same
    file.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    final = data_dir / f"{sha256}{suffix}"
    temporary = data_dir / f".keep-{uuid.uuid4().hex}.tmp"
    try:
        if link:
            try:
                os.link(source, temporary)
            except OSError:  # another file system, or no hard links
                shutil.copyfile(source, temporary)
        else:
            shutil.copyfile(source, temporary)
        _fsync(temporary)
        os.replace(temporary, final)
        _fsync(data_dir)  # the rename itself survives a crash
    finally:
        temporary.unlink(missing_ok=True)
    return StoredTable(sha256=sha256, path=final)


def load(path: Path, *, schema: DatasetSchema, verify: bool = True) -> IngestedTable:
    """Read a table stored in the service's own layout (before migration 0014) back to the
    arrays ingestion returned.

    Raises:
        ValueError: the file's bytes do not match its name (``verify``), or it was stored
            under another schema.
    """
    if verify:
        verify_bytes(path)
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
