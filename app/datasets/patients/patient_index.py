"""The organisation's patient index: which block each patient of a space is in.

A patient is known by a digest of their pseudonymous id, never by the id: the 64-bit keyed
word of the id's canonical text (``app.datasets.intake.id_rules``) under the space's secret, by the
scheme the space recorded when it was made (``digests``; ``record_coins.keyed_words``, the same
PRF as the part coins, under another key), so the index cannot be joined with anything outside
the service and the id cannot be recovered from it. Two ids with one digest (about N^2 / 2^65
for N patients) are one patient to the index, within one upload or across two: their blocks
merge, which can only over-charge.

The index maps each digest to its live block id (``index_segments``: a short log of
segments, one per upload, compacted now and then), in files under ``DATA_DIR/patients/``
named by their SHA-256, which the space row records (``index_files``): an index that does not
match its row is refused, never trusted. An upload adds its segment under the space lock
(``app.ledger.spaces``): its patients already known move to the blocks with the new dataset
added, the rest are new, and each split block's other patients stay in a block of their own.
The ids are keyed while the table is read (``Keyed``), so the accept only searches the
segments and writes the upload's own patients (``bench/patient_budget.py``).
"""

import dataclasses
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy.orm import Session

from app.datasets import record_coins
from app.datasets.patients import index_files
from app.datasets.patients.index_files import IndexCorrupted
from app.datasets.patients.index_segments import Index, Segment
from app.ledger import space_chain, spaces
from app.ledger.spaces import BlockChange, PatientSpace

EMPTY = np.zeros(0, np.uint64)
__all__ = ["IndexCorrupted", "Keyed", "Lookup", "Overlap", "add_dataset",
           "digests", "resolved"]


@dataclass(frozen=True)
class Overlap:
    """What an upload's patients share with the space's earlier datasets: exact counts about
    private data, for the data steward only."""

    patients: int
    already_known: int
    new: int
    shared_with: dict[int, int]  # dataset id -> patients of this upload also in it

    def as_json(self) -> dict[str, Any]:
        """As ``dataset.patient_overlap`` keeps it (JSON object keys are text)."""
        return {**dataclasses.asdict(self),
                "shared_with": {str(k): v for k, v in self.shared_with.items()}}


def digests(ids: pa.Array | pa.ChunkedArray, space: PatientSpace) -> np.ndarray:
    """Each id's keyed digest in the space, in order: under its secret and the scheme it
    recorded when made (never the code's current one, which would split its patients).

    Raises:
        ValueError: the space keys no ids (one dataset's own).
    """
    if space.secret is None or space.id_scheme is None:
        raise ValueError(f"space {space.id} keys no ids (it is one dataset's own)")
    return record_coins.keyed_words(ids, space.secret, scheme=space.id_scheme)


def _patients(words: np.ndarray) -> np.ndarray:
    """The upload's patients: its digests sorted (``np.sort``: numpy 2's vectorised sort; not
    again when the upload's duplicate check sorted them), each once. Ingest refuses an id that
    repeats (``ingest._duplicate_ids`` compares the ids' text), so equal digests here are
    distinct ids that collide: one patient to the index, charged together, which can only
    over-charge. Without a repeat (by the sort: numpy's hash-based ``unique`` takes about 20
    times as long on a million) the sorted array itself comes back."""
    ordered = words if np.all(words[1:] >= words[:-1]) else np.sort(words)
    repeats = ordered[1:] == ordered[:-1]
    if not repeats.any():
        return ordered
    return ordered[np.concatenate(([True], ~repeats))]


@dataclass(frozen=True)
class Keyed:
    """An upload's ids already keyed while its body arrived, and the key and scheme used (the
    space's when the upload claimed its dataset)."""

    secret: str
    words: np.ndarray
    scheme: str

    @classmethod
    def of(cls, secret: str | None, words: np.ndarray | None, *,
           scheme: str | None) -> "Keyed | None":
        if secret is None or words is None or scheme is None:
            return None
        return cls(secret, words, scheme)


LOOKUPS = ThreadPoolExecutor(2, thread_name_prefix="patient-lookup")
"""Where uploads' lookups run: a search releases the GIL, so a large upload's words are
searched in two halves at once (``SPLIT_FROM``) beside the accept's SQL."""
SPLIT_FROM = 1 << 16


@dataclass(frozen=True)
class Lookup:
    """A search of sorted, distinct words in an index, running in consecutive parts."""

    parts: "tuple[Future[tuple[np.ndarray, np.ndarray]], ...]"

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """As ``Index.blocks_of`` of all the words: the parts' answers joined in order."""
        found = [part.result() for part in self.parts]
        if len(found) == 1:
            return found[0]
        return (np.concatenate([known for known, _ in found]),
                np.concatenate([blocks for _, blocks in found]))


def _search(index: Index, words: np.ndarray, pool: Executor = LOOKUPS) -> Lookup:
    """``index.blocks_of(words)`` started on ``pool``, a large search in two halves (each
    still sorted and distinct)."""
    parts = [words] if len(words) < SPLIT_FROM else np.array_split(words, 2)
    return Lookup(tuple(pool.submit(index.blocks_of, part) for part in parts))


def add_dataset(*, session: Session, space_id: int, dataset_id: int,
                ids: pa.Array | pa.ChunkedArray, keyed: Keyed | None = None) -> Overlap:
    """Key an accepted upload's patients into the space and move them into their blocks, in
    the caller's transaction, under the space lock. ``keyed``: the ids' words under the
    space's key, taken as the table was read; used only if that is still the space's key
    (else the ids are keyed here). Ids whose digests collide are one patient (``_patients``).

    Raises:
        ValueError: the space keys no ids (one dataset's own).
        IndexCorrupted: the stored index does not match its record (nothing changes).
    """
    space = spaces.lock_space(session=session, space_id=space_id)
    trusted = (keyed is not None and (keyed.secret, keyed.scheme) == (space.secret,
                                                                     space.id_scheme)
               and len(keyed.words) == len(ids))
    new = _patients(keyed.words if trusted and keyed is not None else digests(ids, space))
    index = index_files.load(space)
    # numpy searches and the files' writes and hashes run without the GIL: on threads of
    # their own while this one runs the SQL that does not need it (under the same lock).
    with ThreadPoolExecutor(1, thread_name_prefix="patient-index") as pool:
        looking = _search(index, new)
        live = spaces.live_block_lists(session=session, space_id=space.id)
        known, current = looking.result()
        joined = np.bincount(current) if len(current) else np.zeros(0, np.int64)
        old_ids = np.flatnonzero(joined)  # block ids are small positive integers: a count each
        changes = [BlockChange(b, n) for b, n in zip(old_ids.tolist(),
                                                     joined[old_ids].tolist(), strict=True)]
        shared = _shared(live, changes)
        fresh = int(len(new) - len(current))
        placed = spaces.apply_upload(session=session, space=space, dataset_id=dataset_id,
                                     changes=changes, new_patients=fresh, live=live)
        space_key, replaces = space.id, space.index_sha256

        def written() -> index_files.Written:  # the segment's gathers too, off this thread
            grown = index.with_segment(_segment(new, known, current, placed), fresh)
            return index_files.written(space_key, replaces, index, grown)

        writing = pool.submit(written)
        space_chain.append_upload(session=session, space=space, dataset_id=dataset_id,
                                  placed=placed)
        index_files.record(space, writing.result())
    return Overlap(patients=len(new), already_known=len(current), new=fresh,
                   shared_with=shared)


def _segment(new: np.ndarray, known: np.ndarray, current: np.ndarray,
             placed: spaces.UploadBlocks) -> Segment:
    """The upload's segment: each known patient in the part of their block with the new
    dataset added, each new one in the fresh block; each split block's other patients
    (older segments') in its stayed part. Lookup tables indexed by block id (ids are small
    positive integers): one gather, not a pass per split block (an upload may split
    thousands)."""
    blocks = np.full(len(new), -1 if placed.fresh is None else placed.fresh, np.int64)
    if len(current):
        table = np.zeros(int(current.max()) + 1, np.int64)
        split = np.fromiter(placed.joined, np.int64, len(placed.joined))
        table[split] = [placed.joined[b] for b in split.tolist()]
        blocks[known] = table[current]
    moved = sorted((b, s) for b, s in placed.stayed.items() if s is not None)
    return Segment(new, blocks, np.array([b for b, _ in moved], np.int64),
                   np.array([s for _, s in moved], np.int64))


def resolved(space: PatientSpace) -> tuple[np.ndarray, np.ndarray]:
    """Every patient of the space once, sorted, with their live block: the index compacted
    (for checks and reports; an upload reads only its own patients' blocks)."""
    base = index_files.load(space).compacted().segments
    return (base[0].keys, base[0].blocks) if base else (EMPTY, np.zeros(0, np.int64))


def _shared(live: spaces.LiveBlocks, changes: list[BlockChange]) -> dict[int, int]:
    """Per earlier dataset, how many of the upload's patients it holds (from the live
    blocks the upload splits)."""
    shared: dict[int, int] = {}
    for change in changes:
        for dataset in live.get(change.block_id, ([], 0))[0]:
            shared[dataset] = shared.get(dataset, 0) + change.joined
    return dict(sorted(shared.items()))


def add_union(*, session: Session, space_id: int, dataset_id: int,
              members: list[int]) -> Overlap:
    """Join a union of the space's datasets (``app.datasets.union``) to the space, in the
    caller's transaction, under the space lock: every live block that holds a member gets
    the union added, whole (nobody's block splits, no id is keyed: the union's patients are
    exactly its members'), and the index records the moves in a segment without patients.

    Raises:
        IndexCorrupted: the stored index does not match its record (nothing changes).
    """
    space = spaces.lock_space(session=session, space_id=space_id)
    live = spaces.live_block_lists(session=session, space_id=space.id)
    wanted = set(members)
    changes = [BlockChange(block, size) for block, (datasets, size) in sorted(live.items())
               if wanted.intersection(datasets)]
    index = index_files.load(space)
    placed = spaces.apply_upload(session=session, space=space, dataset_id=dataset_id,
                                 changes=changes, new_patients=0, live=live)
    space_chain.append_upload(session=session, space=space, dataset_id=dataset_id, placed=placed)
    moved = sorted(placed.joined.items())
    index_files.store(space, index, index.with_segment(Segment(
        EMPTY, np.zeros(0, np.int64), np.array([b for b, _ in moved], np.int64),
        np.array([j for _, j in moved], np.int64)), 0))
    patients = sum(change.joined for change in changes)
    return Overlap(patients=patients, already_known=patients, new=0,
                   shared_with=_shared(live, changes))
