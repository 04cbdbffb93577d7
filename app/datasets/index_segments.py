"""The patient index as a short log of segments, so an upload writes its own patients only.

A **segment** is what one upload wrote: its patients' digests (sorted) with the block each
moved to, and the split blocks whose other patients moved to their "stayed" part (``moved``).
A patient's block is the one in the newest segment that holds them, carried through the
``moved`` maps of every later segment: after that upload they were in no later one, so each
later split left them in its stayed part. The first segment is the **base**: a compacted
index, every patient once in their live block (today's block of each, and what an index
written before segments is).

An upload's cost is one search per segment and a write of its own patients, not a rewrite
of every patient the organisation ever uploaded (``bench/ingest.py --http`` adds a million
each time). The log is compacted into one base when its segments outgrow the base or number
more than ``MAX_SEGMENTS``, so each patient is rewritten a bounded number of times on
average and a lookup searches a few segments.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_SEGMENTS = 8
LOG_RATIO = 4.0
"""Compaction: when the segments after the base hold more than ``LOG_RATIO`` times its rows,
all are folded into one base; else, when there are more than ``MAX_SEGMENTS``, the segments
after the base are folded into one. Each record is rewritten a bounded number of times on
average, and a lookup searches at most ``MAX_SEGMENTS`` segments."""
EMPTY_KEYS = np.zeros(0, np.uint64)
EMPTY_BLOCKS = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Segment:
    """One upload's patients and where they went; ``moved_from`` (sorted) and ``moved_to``:
    each split block and its stayed part, for the patients of older segments."""

    keys: np.ndarray
    blocks: np.ndarray
    moved_from: np.ndarray = field(default_factory=lambda: EMPTY_BLOCKS)
    moved_to: np.ndarray = field(default_factory=lambda: EMPTY_BLOCKS)

    def largest_block(self) -> int:
        return max((int(a.max()) for a in (self.blocks, self.moved_from, self.moved_to)
                    if len(a)), default=0)


def _carries(segments: Sequence[Segment]) -> Iterator[np.ndarray]:
    """Newest first: for each segment, the table that takes a block its records name to the
    live block (every newer segment's ``moved`` applied in order), and last, the table of
    all of them together. Tables are indexed by block id (small positive integers): one
    gather per segment, not a search per record."""
    size = max((s.largest_block() for s in segments), default=0) + 1
    table = np.arange(size)
    for segment in reversed(segments):
        yield table
        if len(segment.moved_from):
            step = np.arange(size)
            step[segment.moved_from] = segment.moved_to
            table = table[step]
    yield table


@dataclass(frozen=True)
class Index:
    """The segments, oldest (the base) first, and how many distinct patients they hold."""

    segments: tuple[Segment, ...] = ()
    patients: int = 0

    def blocks_of(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted, distinct ``words``: which are known, and the live block of each known
        one (in order)."""
        found = np.full(len(words), -1, np.int64)  # the newest segment holding each word
        blocks = np.zeros(len(words), np.int64)
        for number, segment in enumerate(self.segments):
            if not len(segment.keys):
                continue
            at = np.minimum(np.searchsorted(segment.keys, words), len(segment.keys) - 1)
            hit = segment.keys[at] == words
            blocks[hit], found[hit] = segment.blocks[at[hit]], number
        tables = _carries(self.segments)
        for number in reversed(range(len(self.segments))):
            table = next(tables)
            mine = found == number
            blocks[mine] = table[blocks[mine]]
        known = found >= 0
        return known, blocks[known]

    def with_segment(self, segment: Segment, fresh: int) -> "Index":
        """This index with an upload's segment appended (``fresh``: its patients not yet
        known), compacted when the log has grown past its bounds (``LOG_RATIO``,
        ``MAX_SEGMENTS``)."""
        grown = (*self.segments, segment)
        log_rows = sum(len(s.keys) for s in grown[1:])
        if log_rows > LOG_RATIO * len(grown[0].keys):
            return Index((fold(grown, base=True),), self.patients + fresh).checked()
        if len(grown) > MAX_SEGMENTS:
            return Index((grown[0], fold(grown[1:], base=False)), self.patients + fresh)
        return Index(grown, self.patients + fresh)

    def compacted(self) -> "Index":
        """One base segment: every patient once, sorted, in their live block."""
        return Index((fold(self.segments, base=True),), self.patients).checked()

    def checked(self) -> "Index":
        """This index, if its base holds its count of patients (else a ValueError)."""
        held = len(self.segments[0].keys) if self.segments else 0
        if len(self.segments) <= 1 and held != self.patients:
            raise ValueError(f"the index holds {held} patients, its record {self.patients}")
        return self


def fold(segments: Sequence[Segment], *, base: bool) -> Segment:
    """Consecutive segments as one that means the same: each patient once, with the block
    the newest of them gives, carried through the later ones' moves; and (``base``: nothing
    is older, so no moves are kept) the moves of all of them, composed.

    Merged oldest first, each segment into the sorted result (a newer record replaces an
    older one): about the memory of the result twice, where one sort of every record with
    its order took three times as much on an index of 5 million (``bench/ingest.py``)."""
    tables = _carries(segments)
    carried = [next(tables) for _ in segments][::-1]  # oldest first, as the segments
    everything = next(tables)
    keys, blocks = EMPTY_KEYS, EMPTY_BLOCKS
    for segment, table in zip(segments, carried, strict=True):
        mine = table[segment.blocks]
        if len(keys):
            at = np.minimum(np.searchsorted(keys, segment.keys), len(keys) - 1)
            hit = keys[at] == segment.keys
            blocks[at[hit]] = mine[hit]
            fresh = ~hit
            keys, blocks = _merge(keys, blocks, segment.keys[fresh], mine[fresh])
        else:
            keys, blocks = segment.keys, mine  # a gather: a new array, written below
    if base:
        return Segment(keys, blocks)
    moved = np.unique(np.concatenate([s.moved_from for s in segments]))
    return Segment(keys, blocks, moved, everything[moved])


def _merge(keys: np.ndarray, blocks: np.ndarray, fresh: np.ndarray,
           fresh_blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted union of ``keys`` and the ``fresh`` digests (sorted, none in ``keys``), with
    their blocks: each fresh digest goes where ``searchsorted`` puts it (no new sort)."""
    if not len(fresh):
        return keys, blocks
    slots = np.searchsorted(keys, fresh) + np.arange(len(fresh))
    taken = np.zeros(len(keys) + len(fresh), bool)
    taken[slots] = True
    merged = np.empty(len(taken), np.uint64)
    merged[slots], merged[~taken] = fresh, keys
    merged_blocks = np.empty(len(taken), np.int64)
    merged_blocks[slots], merged_blocks[~taken] = fresh_blocks, blocks
    return merged, merged_blocks
