"""The organisation's patient index: which block each patient of a space is in.

A patient is known by a digest of their pseudonymous id, never by the id: the 64-bit keyed
word of the id under the space's secret (``record_coins.keyed_words``, the same PRF as the
part coins, under another key), so the index cannot be joined with anything outside the
service and the id cannot be recovered from it. Two ids with one digest (about N^2 / 2^65 for
N patients) are one patient to the index: their blocks merge, which can only over-charge.

The index is two aligned arrays, the sorted digests and each one's live block id, in one file
under ``DATA_DIR/patients/`` named by its SHA-256 (``_parts``: raw little-endian words), which
the space row records: an index that does not match its row is refused, never trusted. An
upload rewrites it under the space lock (``app.ledger.spaces``): its patients already known
move to the blocks with the new dataset added, the rest are new, and each split block's other
patients stay in a block of their own. The ids are keyed while the body arrives (``Keyed``),
so the accept only merges. The cost is one sorted merge (``bench/patient_budget.py``).
"""

import hashlib
import io
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import InvalidRequest
from app.core.settings import settings
from app.core.sorting import sort_uint64
from app.datasets import record_coins
from app.ledger import space_chain, spaces
from app.ledger.spaces import BlockChange, PatientSpace

EMPTY = np.zeros(0, np.uint64)


class IndexCorrupted(RuntimeError):
    """The index file is missing or its bytes do not hash to what the space row records."""


@dataclass(frozen=True)
class Overlap:
    """What an upload's patients share with the space's earlier datasets: exact counts about
    private data, for the data steward only."""

    patients: int
    already_known: int
    new: int
    shared_with: dict[int, int]  # dataset id -> patients of this upload also in it


def digests(ids: pa.Array | pa.ChunkedArray, secret: str) -> np.ndarray:
    """Each id's keyed digest under the space's secret (hex), in order.

    Raises:
        InvalidRequest: two ids of the table are one patient (422: a patient is one row).
    """
    words = record_coins.keyed_words(ids, secret, scheme=record_coins.CURRENT_SCHEME)
    _sorted_set(words)
    return words


def _sorted_set(words: np.ndarray) -> np.ndarray:
    """The digests sorted (``sort_uint64``: a radix sort), after checking that none repeats
    (by the sort: numpy's hash-based ``unique`` takes about 20 times as long on a million).

    Raises:
        InvalidRequest: two ids of the table are one patient (422: a patient is one row).
    """
    ordered = sort_uint64(words)
    if np.any(ordered[1:] == ordered[:-1]):
        raise InvalidRequest("two rows have the same patient id: a patient is one row",
                             field="body", allowed="one row per patient id")
    return ordered


MAGIC = b"DPIDX\x001\x00"  # 8 bytes: the raw format's name and version


def _path(space: PatientSpace, sha256: str, suffix: str = ".index") -> Path:
    return settings.data_dir / "patients" / f"space-{space.id}-{sha256}{suffix}"


def _parts(keys: np.ndarray, blocks: np.ndarray) -> list[memoryview]:
    """The raw format, in its parts: ``MAGIC``, the count (8 bytes, little-endian), the
    digests, the block ids (little-endian 64-bit each). (``np.savez``, the format before,
    zipped them at several times the cost on a million patients.)"""
    return [memoryview(MAGIC), memoryview(len(keys).to_bytes(8, "little")),
            np.ascontiguousarray(keys, "<u8").data, np.ascontiguousarray(blocks, "<i8").data]


def _decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Both formats: the raw one, or an ``.npz`` written before it."""
    if not data.startswith(MAGIC):
        with np.load(io.BytesIO(data)) as stored:
            return stored["digests"], stored["blocks"]
    count = int.from_bytes(data[8:16], "little")
    if len(data) != 16 + 16 * count:
        raise IndexCorrupted("patient index has the wrong length for its count")
    # Views of the bytes read, not copies (read-only: the upload builds new arrays)
    return (np.frombuffer(data, "<u8", count, 16),
            np.frombuffer(data, "<i8", count, 16 + 8 * count))


def load(space: PatientSpace) -> tuple[np.ndarray, np.ndarray]:
    """The space's sorted digests and their block ids (empty for a space without any).

    Raises:
        IndexCorrupted: the file is missing or does not hash to the space row's SHA-256.
    """
    if space.index_sha256 is None:
        return EMPTY, np.zeros(0, np.int64)
    cached = _last.get(space.id)
    if cached is not None and cached[0] == space.index_sha256:
        return cached[1], cached[2]
    found = [path for suffix in (".index", ".npz")
             if (path := _path(space, space.index_sha256, suffix)).exists()]
    try:
        data = found[0].read_bytes()
    except (IndexError, FileNotFoundError):
        raise IndexCorrupted(f"patient index of space {space.id} is missing") from None
    if hashlib.sha256(data).hexdigest() != space.index_sha256:
        raise IndexCorrupted(f"patient index of space {space.id} does not match its record")
    keys, blocks = _decode(data)
    if len(keys) != space.index_rows or np.any(keys[1:] <= keys[:-1]):
        raise IndexCorrupted(f"patient index of space {space.id} is not a sorted set")
    _remember(space.id, space.index_sha256, keys, blocks)
    return keys, blocks


_last: dict[int, tuple[str, np.ndarray, np.ndarray]] = {}
"""Per space, the last index this process read or wrote, by its SHA-256: an upload after an
upload in the same process skips reading and hashing 16 MB per million patients. Only the
index the space row names is used, so a rolled-back write or another process's newer index is
read from its file as ever."""


def _remember(space_id: int, sha256: str, keys: np.ndarray, blocks: np.ndarray) -> None:
    for array in (keys, blocks):
        array.setflags(write=False)  # shared by later uploads: never edited in place
    _last[space_id] = (sha256, keys, blocks)


def _store(space: PatientSpace, keys: np.ndarray, blocks: np.ndarray) -> None:
    """Write the new index (before the transaction commits: a rollback leaves an unused file,
    never a row naming a missing one) and point the space row at it.

    The arrays are written and hashed from their own memory (``_parts``), never joined into
    one bytes object: in the served process, fresh 16 MB buffers cost far more than their
    copy (page faults), about 0.1-0.4 s of an upload of a million patients.
    """
    parts = _parts(keys, blocks)
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    sha = digest.hexdigest()
    path = _path(space, sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")  # one per writer
    with temporary.open("wb") as out:
        for part in parts:
            out.write(part)
    temporary.replace(path)
    space.index_sha256, space.index_rows = sha, len(keys)
    _remember(space.id, sha, keys, blocks)


@dataclass(frozen=True)
class Keyed:
    """An upload's ids already keyed while its body arrived, and the key used (the space's
    key when the upload claimed its dataset)."""

    secret: str
    words: np.ndarray

    @classmethod
    def of(cls, secret: str | None, words: np.ndarray | None) -> "Keyed | None":
        return None if secret is None or words is None else cls(secret, words)


def add_dataset(*, session: Session, space_id: int, dataset_id: int,
                ids: pa.Array | pa.ChunkedArray, keyed: Keyed | None = None) -> Overlap:
    """Key an accepted upload's patients into the space and move them into their blocks, in
    the caller's transaction, under the space lock. ``keyed``: the ids' words under the
    space's key, taken as the body arrived; used only if that is still the space's key (else
    the ids are keyed here).

    Raises:
        InvalidRequest: an id repeats (422).
        IndexCorrupted: the stored index does not match its record (nothing changes).
    """
    space = spaces.lock_space(session=session, space_id=space_id)
    if space.secret is None:
        raise ValueError(f"space {space.id} keys no ids (it is one dataset's own)")
    words = (keyed.words if keyed is not None and keyed.secret == space.secret
             and len(keyed.words) == len(ids)
             else record_coins.keyed_words(ids, space.secret, scheme=record_coins.CURRENT_SCHEME))
    new = _sorted_set(words)
    keys, blocks = load(space)
    at = np.searchsorted(keys, new)
    known = at < len(keys)
    known[known] = keys[at[known]] == new[known]
    joined = np.bincount(blocks[at[known]]) if known.any() else np.zeros(0, np.int64)
    old_ids = np.flatnonzero(joined)  # block ids are small positive integers: a count each
    changes = [BlockChange(int(b), int(joined[b])) for b in old_ids]
    shared = _shared(session, space.id, changes)
    placed = spaces.apply_upload(session=session, space=space, dataset_id=dataset_id,
                                 changes=changes, new_patients=int((~known).sum()))
    space_chain.append_upload(session=session, space=space, dataset_id=dataset_id, placed=placed)
    moved = np.zeros(len(keys), bool)
    moved[at[known]] = True
    fresh = new[~known]
    merged, merged_blocks = _merge(keys, _remap(blocks, moved, placed), fresh,
                                   placed.fresh or 0)
    _store(space, merged, merged_blocks)
    return Overlap(patients=len(new), already_known=int(known.sum()), new=len(fresh),
                   shared_with=shared)


def _remap(blocks: np.ndarray, moved: np.ndarray, placed: spaces.UploadBlocks) -> np.ndarray:
    """Each known patient's block after the upload: a split block's part with the new dataset
    for those ``moved`` into it, its part without for the others. Two lookup tables indexed
    by block id (ids are small positive integers), one gather over the index: not one pass
    per split block (an upload may split thousands), nor a search."""
    if not placed.joined:
        return blocks.copy()
    size = int(blocks.max()) + 1
    joined, stayed = np.arange(size), np.arange(size)
    split = np.fromiter(placed.joined, np.int64, len(placed.joined))
    joined[split] = [placed.joined[b] for b in split.tolist()]
    stayed[split] = [b if (s := placed.stayed[b]) is None else s for b in split.tolist()]
    remapped = stayed[blocks]
    remapped[moved] = joined[blocks[moved]]
    return remapped


def _merge(keys: np.ndarray, blocks: np.ndarray, fresh: np.ndarray,
           fresh_block: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted union of the index and the ``fresh`` digests (sorted, none in the index),
    with their blocks: each fresh digest goes where ``searchsorted`` puts it (no new sort)."""
    if not len(fresh):  # every patient known: the index keeps its digests
        return keys, blocks
    slots = np.searchsorted(keys, fresh) + np.arange(len(fresh))
    taken = np.zeros(len(keys) + len(fresh), bool)
    taken[slots] = True
    merged = np.empty(len(taken), np.uint64)
    merged[slots], merged[~taken] = fresh, keys
    merged_blocks = np.empty(len(taken), np.int64)
    merged_blocks[slots], merged_blocks[~taken] = fresh_block, blocks
    return merged, merged_blocks


def _shared(session: Session, space_id: int, changes: list[BlockChange]) -> dict[int, int]:
    """Per earlier dataset, how many of the upload's patients it holds (from the blocks, read
    in one query)."""
    datasets = {block: listed for block, listed in session.execute(
        select(spaces.PatientBlock.id, spaces.PatientBlock.datasets).where(
            spaces.PatientBlock.space_id == space_id,
            spaces.PatientBlock.closed_at.is_(None)))}
    shared: dict[int, int] = {}
    for change in changes:
        for dataset in datasets.get(change.block_id, ()):
            shared[dataset] = shared.get(dataset, 0) + change.joined
    return dict(sorted(shared.items()))
