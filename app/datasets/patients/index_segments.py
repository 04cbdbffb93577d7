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
``MAX_SEGMENTS``, so each patient is rewritten a bounded number of times on average and a
lookup searches a few segments; that fold runs after the upload has committed
(``app.datasets.patients.index_fold``), not while the client waits.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_SEGMENTS = 8
LOG_RATIO = 4.0
"""Compaction (``Index.folded``): when the segments after the base hold more than
``LOG_RATIO`` times its rows, all are folded into one base; else, when there are
``MAX_SEGMENTS``, the segments after the base are folded into one. Each record is rewritten a
bounded number of times on average, and a lookup searches at most ``MAX_SEGMENTS`` segments
(an upload folds itself only if the fold after the last one has not run)."""
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
        one (in order). Segments oldest first, each hit carried to its live block at once
        (a newer segment's hit replaces an older one's); each search goes the cheaper way,
        the shorter sorted array's words looked up in the longer."""
        known = np.zeros(len(words), bool)
        blocks = np.zeros(len(words), np.int64)
        carried = [*_carries(self.segments)][-2::-1]  # oldest first, as the segments
        for segment, table in zip(self.segments, carried, strict=True):
            if not len(segment.keys) or not len(words):
                continue
            # Only the segment's keys within the words' range can match: a search of a part
            # of the words (``patient_index._search`` runs halves at once) reads its part.
            lo = int(np.searchsorted(segment.keys, words[0], "left"))
            hi = int(np.searchsorted(segment.keys, words[-1], "right"))
            keys, placed = segment.keys[lo:hi], segment.blocks[lo:hi]
            if not len(keys):
                continue
            if len(keys) < len(words):
                at = np.minimum(np.searchsorted(words, keys), len(words) - 1)
                hit = words[at] == keys
                at = at[hit]
                blocks[at], known[at] = table[placed[hit]], True
                continue
            at = np.minimum(np.searchsorted(keys, words), len(keys) - 1)
            hit = keys[at] == words
            blocks[hit], known[hit] = table[placed[at[hit]]], True
        return known, blocks[known]

    def with_segment(self, segment: Segment, fresh: int) -> "Index":
        """This index with an upload's segment appended (``fresh``: its patients not yet
        known). The fold runs after the upload commits (``app.datasets.patients.index_fold``), so
        the upload folds only when that has not kept up and the log would pass ``MAX_SEGMENTS``:
        a lookup still searches at most that many segments."""
        grown = Index((*self.segments, segment), self.patients + fresh)
        return grown.folded() if len(grown.segments) > MAX_SEGMENTS else grown

    def needs_fold(self) -> bool:
        """Whether the log has grown past its bounds: its segments after the base hold more
        than ``LOG_RATIO`` times the base's rows, or there are ``MAX_SEGMENTS`` segments (one
        fewer than an upload folds at, so an upload after a fold never has to)."""
        return self._outgrew_base() or len(self.segments) >= max(MAX_SEGMENTS, 3)

    def folded(self) -> "Index":
        """The same index with its log folded: into one base when the log outgrew the base
        (``LOG_RATIO``), else the segments after the base into one (itself when there is
        nothing to fold)."""
        if self._outgrew_base():
            return self.compacted()
        if len(self.segments) < 3:
            return self
        return Index((self.segments[0], fold(self.segments[1:], base=False)), self.patients)

    def _outgrew_base(self) -> bool:
        log_rows = sum(len(s.keys) for s in self.segments[1:])
        return len(self.segments) > 1 and log_rows > LOG_RATIO * len(self.segments[0].keys)

    def compacted(self) -> "Index":
        """One base segment: every patient once, sorted, in their live block."""
        return Index((fold(self.segments, base=True, size=self.patients),),
                     self.patients).checked()

    def checked(self) -> "Index":
        """This index, if its base holds its count of patients (else a ValueError)."""
        held = len(self.segments[0].keys) if self.segments else 0
        if len(self.segments) <= 1 and held != self.patients:
            raise ValueError(f"the index holds {held} patients, its record {self.patients}")
        return self


FOLD_PART = 1 << 18
"""About how many records ``fold`` merges at a time (one range of keys): its scratch arrays
stay that small while the result is written into arrays allocated once."""


def fold(segments: Sequence[Segment], *, base: bool, size: int | None = None) -> Segment:
    """Consecutive segments as one that means the same: each patient once, with the block
    the newest of them gives, carried through the later ones' moves; and (``base``: nothing
    is older, so no moves are kept) the moves of all of them, composed. ``size``: how many
    distinct patients they hold, when known (a base: the index's record), so the result is
    allocated once at its size.

    Merged one range of keys at a time (``FOLD_PART`` records), in each range oldest first,
    each segment into the sorted result (a newer record replaces an older one). Merging
    whole segments into a growing result took twice the memory of the result in scratch
    arrays on an index of 5 million (``bench/ingest.py``), and one sort of every record
    with its order three times.

    Raises:
        ValueError: the segments do not hold ``size`` distinct patients.
    """
    tables = _carries(segments)
    carried = [next(tables) for _ in segments][::-1]  # oldest first, as the segments
    everything = next(tables)
    total = sum(len(s.keys) for s in segments)
    keys = np.empty(total if size is None else size, np.uint64)
    blocks = np.empty(len(keys), np.int64)
    filled = 0
    for bounds in _parts(segments, total):
        part_keys, part_blocks = _fold_part([
            (s.keys[start:stop], table[s.blocks[start:stop]])
            for s, table, (start, stop) in zip(segments, carried, bounds, strict=True)])
        if filled + len(part_keys) > len(keys):
            raise ValueError(f"the segments hold more than the {size} patients of their record")
        keys[filled:filled + len(part_keys)] = part_keys
        blocks[filled:filled + len(part_keys)] = part_blocks
        filled += len(part_keys)
    if size is not None and filled != size:
        raise ValueError(f"the segments hold {filled} patients, their record {size}")
    if filled < len(keys):  # records repeated across segments: only the distinct ones kept
        keys, blocks = keys[:filled].copy(), blocks[:filled].copy()
    if base:
        return Segment(keys, blocks)
    moved = np.unique(np.concatenate([s.moved_from for s in segments]))
    return Segment(keys, blocks, moved, everything[moved])


def _parts(segments: Sequence[Segment], total: int) -> Iterator[list[tuple[int, int]]]:
    """Ranges of keys of about ``FOLD_PART`` records, cut at keys of the longest segment:
    for each range, the slice of each segment that falls in it (the same key always falls
    in the same range)."""
    longest = max((s.keys for s in segments), key=len, default=EMPTY_KEYS)
    count = min(max(1, total // FOLD_PART), len(longest))
    at = (np.arange(1, count) * len(longest)) // max(count, 1)
    cuts = [np.concatenate(([0], np.searchsorted(s.keys, longest[at]), [len(s.keys)]))
            for s in segments]
    for part in range(len(at) + 1):
        yield [(int(c[part]), int(c[part + 1])) for c in cuts]


def _fold_part(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One range of keys: each segment's keys there (oldest first) with their live blocks,
    merged into one sorted set, a newer record replacing an older one."""
    keys, blocks = EMPTY_KEYS, EMPTY_BLOCKS
    for part_keys, mine in parts:  # ``mine``: a gather, a new array that may be written
        if not len(part_keys):
            continue
        if not len(keys):
            keys, blocks = part_keys, mine
            continue
        at = np.minimum(np.searchsorted(keys, part_keys), len(keys) - 1)
        hit = keys[at] == part_keys
        blocks[at[hit]] = mine[hit]
        fresh = ~hit
        keys, blocks = _merge(keys, blocks, part_keys[fresh], mine[fresh])
    return keys, blocks


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
