"""The organisation's patient index: which block each patient of a space is in.

A patient is known by a digest of their pseudonymous id, never by the id: the 64-bit keyed
word of the id under the space's secret (``record_coins.keyed_words``, the same PRF as the
part coins, under another key), so the index cannot be joined with anything outside the
service and the id cannot be recovered from it. Two ids with one digest (about N^2 / 2^65 for
N patients) are one patient to the index: their blocks merge, which can only over-charge.

The index is two aligned arrays, the sorted digests and each one's live block id, in one file
under ``DATA_DIR/patients/`` named by its SHA-256, which the space row records: an index that
does not match its row is refused, never trusted. An upload rewrites it under the space lock
(``app.ledger.spaces``): its patients already known move to the blocks with the new dataset
added, the rest are new, and each split block's other patients stay in a block of their own.
The cost is one sorted merge (``bench/patient_budget.py``).
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
    """The digests sorted, after checking that none repeats (by the sort: numpy's hash-based
    ``unique`` takes about 20 times as long on a million digests).

    Raises:
        InvalidRequest: two ids of the table are one patient (422: a patient is one row).
    """
    ordered = np.sort(words)
    if np.any(ordered[1:] == ordered[:-1]):
        raise InvalidRequest("two rows have the same patient id: a patient is one row",
                             field="body", allowed="one row per patient id")
    return ordered


def _path(space: PatientSpace, sha256: str) -> Path:
    return settings.data_dir / "patients" / f"space-{space.id}-{sha256}.npz"


def _encode(keys: np.ndarray, blocks: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, digests=keys.astype(np.uint64), blocks=blocks.astype(np.int64))
    return buffer.getvalue()


def load(space: PatientSpace) -> tuple[np.ndarray, np.ndarray]:
    """The space's sorted digests and their block ids (empty for a space without any).

    Raises:
        IndexCorrupted: the file is missing or does not hash to the space row's SHA-256.
    """
    if space.index_sha256 is None:
        return EMPTY, np.zeros(0, np.int64)
    path = _path(space, space.index_sha256)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IndexCorrupted(f"patient index of space {space.id} is missing") from None
    if hashlib.sha256(data).hexdigest() != space.index_sha256:
        raise IndexCorrupted(f"patient index of space {space.id} does not match its record")
    with np.load(io.BytesIO(data)) as stored:
        keys, blocks = stored["digests"], stored["blocks"]
    if len(keys) != space.index_rows or np.any(keys[1:] <= keys[:-1]):
        raise IndexCorrupted(f"patient index of space {space.id} is not a sorted set")
    return keys, blocks


def _store(space: PatientSpace, keys: np.ndarray, blocks: np.ndarray) -> None:
    """Write the new index (before the transaction commits: a rollback leaves an unused file,
    never a row naming a missing one) and point the space row at it."""
    data = _encode(keys, blocks)
    sha = hashlib.sha256(data).hexdigest()
    path = _path(space, sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")  # one per writer
    temporary.write_bytes(data)
    temporary.replace(path)
    space.index_sha256, space.index_rows = sha, len(keys)


def add_dataset(*, session: Session, space_id: int, dataset_id: int,
                ids: pa.Array | pa.ChunkedArray) -> Overlap:
    """Key an accepted upload's patients into the space and move them into their blocks, in
    the caller's transaction, under the space lock.

    Raises:
        InvalidRequest: an id repeats (422).
        IndexCorrupted: the stored index does not match its record (nothing changes).
    """
    space = spaces.lock_space(session=session, space_id=space_id)
    if space.secret is None:
        raise ValueError(f"space {space.id} keys no ids (it is one dataset's own)")
    new = _sorted_set(record_coins.keyed_words(ids, space.secret,
                                               scheme=record_coins.CURRENT_SCHEME))
    keys, blocks = load(space)
    at = np.searchsorted(keys, new)
    known = at < len(keys)
    known[known] = keys[at[known]] == new[known]
    old_ids, joined = np.unique(blocks[at[known]], return_counts=True)
    changes = [BlockChange(int(b), int(n)) for b, n in zip(old_ids, joined, strict=True)]
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
    for those ``moved`` into it, its part without for the others. One sorted lookup over the
    index, not one pass per split block (an upload may split thousands)."""
    if not placed.joined:
        return blocks.copy()
    old = np.array(sorted(placed.joined), np.int64)
    joined = np.array([placed.joined[b] for b in old.tolist()], np.int64)
    stay = [placed.stayed[b] for b in old.tolist()]
    stayed = np.array([-1 if b is None else b for b in stay], np.int64)
    slot = np.minimum(np.searchsorted(old, blocks), len(old) - 1)
    target = np.where(moved, joined[slot], stayed[slot])
    change = (old[slot] == blocks) & (target >= 0)
    remapped = blocks.copy()
    remapped[change] = target[change]
    return remapped


def _merge(keys: np.ndarray, blocks: np.ndarray, fresh: np.ndarray,
           fresh_block: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted union of the index and the ``fresh`` digests (sorted, none in the index),
    with their blocks: each fresh digest goes where ``searchsorted`` puts it (no new sort)."""
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
