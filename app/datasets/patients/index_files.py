"""The patient index's files: segments named by their SHA-256, and the list that a space row
names by its SHA-256 (``app.datasets.patients.index_segments`` says what a segment is).

Under ``DATA_DIR/patients/``: ``space-{id}-{sha}.segment`` holds one segment in a raw format
(``SEGMENT_MAGIC``, three counts, then the digests, blocks and moved maps as little-endian
64-bit words, written and hashed straight from the arrays); ``space-{id}-{sha}.index`` is the
**list** (``LIST_MAGIC`` and JSON: each segment's SHA-256, the count of distinct patients,
and the SHA-256 of the list it replaced).
The space row records the list's SHA-256 and the count; the list names each segment's
SHA-256: a file that does not hash to what names it is refused, never trusted. An index
written before segments (one raw ``INDEX_MAGIC`` file, or an ``.npz`` before that) loads as
one base segment. Files are written before the transaction commits: a rollback leaves an
unused file, never a row naming a missing one. ``collect`` deletes, after the row has moved
on, the files that neither the recorded index nor the one it replaced names.
"""

import hashlib
import io
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.settings import settings
from app.datasets.patients.index_segments import Index, Segment
from app.ledger.spaces import PatientSpace

INDEX_MAGIC = b"DPIDX\x001\x00"  # one compacted index, before segments
LIST_MAGIC = b"DPIDX\x002\x00"  # the list of segments
SEGMENT_MAGIC = b"DPSEG\x001\x00"


class IndexCorrupted(RuntimeError):
    """An index file is missing or its bytes do not hash to what names it."""


def _path(space: PatientSpace | int, sha256: str, suffix: str) -> Path:
    space_id = space if isinstance(space, int) else space.id
    return settings.data_dir / "patients" / f"space-{space_id}-{sha256}{suffix}"


def _read(space: PatientSpace, sha256: str, suffixes: tuple[str, ...]) -> bytes:
    return _read_at(space, sha256, suffixes)[0]


def _read_at(space: PatientSpace, sha256: str,
             suffixes: tuple[str, ...]) -> tuple[bytes, Path]:
    for suffix in suffixes:
        path = _path(space, sha256, suffix)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        if hashlib.sha256(data).hexdigest() != sha256:
            raise IndexCorrupted(f"patient index file of space {space.id} does not match "
                                 "what names it")
        return data, path
    raise IndexCorrupted(f"patient index file {sha256[:12]} of space {space.id} is missing")


def _segment_parts(segment: Segment) -> list[memoryview]:
    counts = (len(segment.keys), len(segment.moved_from))
    return [memoryview(SEGMENT_MAGIC), memoryview(b"".join(c.to_bytes(8, "little")
                                                           for c in (*counts, 0))),
            np.ascontiguousarray(segment.keys, "<u8").data,
            np.ascontiguousarray(segment.blocks, "<i8").data,
            np.ascontiguousarray(segment.moved_from, "<i8").data,
            np.ascontiguousarray(segment.moved_to, "<i8").data]


def _words(data: bytes, dtype: str, count: int, at: int) -> np.ndarray:
    return np.frombuffer(data, dtype, count, at)  # a read-only view, not a copy


def _decode_segment(data: bytes) -> Segment:
    """A segment file, or an index file from before segments (one base segment)."""
    if data.startswith(SEGMENT_MAGIC):
        keys, moved = (int.from_bytes(data[8 + 8 * k:16 + 8 * k], "little") for k in range(2))
        if len(data) != 32 + 16 * keys + 16 * moved:
            raise IndexCorrupted("patient index segment has the wrong length for its counts")
        at = 32 + 16 * keys
        return Segment(_words(data, "<u8", keys, 32), _words(data, "<i8", keys, 32 + 8 * keys),
                       _words(data, "<i8", moved, at), _words(data, "<i8", moved, at + 8 * moved))
    if data.startswith(INDEX_MAGIC):
        count = int.from_bytes(data[8:16], "little")
        if len(data) != 16 + 16 * count:
            raise IndexCorrupted("patient index has the wrong length for its count")
        return Segment(_words(data, "<u8", count, 16), _words(data, "<i8", count, 16 + 8 * count))
    with np.load(io.BytesIO(data)) as stored:
        return Segment(stored["digests"], stored["blocks"])


def _checked(space: PatientSpace, segment: Segment) -> Segment:
    keys, moved = segment.keys, segment.moved_from
    if (len(segment.blocks) != len(keys) or len(segment.moved_to) != len(moved)
            or np.any(keys[1:] <= keys[:-1]) or np.any(moved[1:] <= moved[:-1])):
        raise IndexCorrupted(f"patient index of space {space.id}: a segment is not a sorted set")
    return segment


_last: dict[int, tuple[str, Index, tuple[str, ...]]] = {}
"""Per space, the last index this process read or wrote: the list's SHA-256, the index and
its segments' SHA-256s. An upload after an upload in the same process skips reading and
hashing its segments; only the index the space row names is used, so a rolled-back write or
another process's newer index is read from its files (reusing the segments it shares)."""


def load(space: PatientSpace) -> Index:
    """The space's index (empty for a space without any).

    Raises:
        IndexCorrupted: a file is missing, does not hash to what names it, or is not a
            sorted set; or the index does not hold the space row's count of patients.
    """
    if space.index_sha256 is None:
        return Index()
    cached = _last.get(space.id)
    if cached is not None and cached[0] == space.index_sha256:
        return cached[1]
    data = _read(space, space.index_sha256, (".index", ".npz"))
    if data.startswith(LIST_MAGIC):
        listed = json.loads(data[len(LIST_MAGIC):])
        shas, patients = tuple(listed["segments"]), int(listed["patients"])
        known = dict(zip(cached[2], cached[1].segments, strict=True)) if cached else {}
        index = Index(tuple(known.get(sha) or _checked(space, _decode_segment(
            _read(space, sha, (".segment",)))) for sha in shas), patients)
    else:
        shas = (space.index_sha256,)
        base = _checked(space, _decode_segment(data))
        index = Index((base,), len(base.keys))
    if index.patients != space.index_rows:
        raise IndexCorrupted(f"patient index of space {space.id} does not hold its record's "
                             "count of patients")
    _remember(space.id, space.index_sha256, index, shas)
    return index


def _remember(space_id: int, sha256: str, index: Index, shas: tuple[str, ...]) -> None:
    for segment in index.segments:  # shared by later uploads: never edited in place
        for array in (segment.keys, segment.blocks, segment.moved_from, segment.moved_to):
            if array.flags.writeable:
                array.setflags(write=False)
    _last[space_id] = (sha256, index, shas)


def _write(path: Path, parts: list[memoryview]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")  # one per writer
    with temporary.open("wb") as out:
        for part in parts:
            out.write(part)
    temporary.replace(path)


def _sha256(parts: list[memoryview]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def store(space: PatientSpace, before: Index, after: Index) -> None:
    """Write ``after``'s segments that ``before`` (the index it grew from) lacks, and its
    list, and point the space row at the list (``written``, then ``record``)."""
    record(space, written(space.id, space.index_sha256, before, after))


@dataclass(frozen=True)
class Written:
    """An index whose files are written, not yet recorded on its space row: its list's
    SHA-256, the index, its segments' SHA-256s, and the list it replaces (``previous``)."""

    sha256: str
    index: Index
    shas: tuple[str, ...]
    previous: str | None


def written(space_id: int, replaces: str | None, before: Index, after: Index) -> Written:
    """Write ``after``'s segments that ``before`` (the index the space row records now, its
    list ``replaces``) lacks, and its list naming the one it replaces; the row is unchanged
    (so this may run on a thread of its own while the caller's session works).

    The arrays are written and hashed from their own memory, never joined into one bytes
    object: in the served process fresh buffers cost far more than their copy (page faults).
    """
    cached = _last.get(space_id)
    known = (dict(zip((id(s) for s in cached[1].segments), cached[2], strict=True))
             if cached is not None and cached[1] is before else {})
    shas = []
    for segment in after.segments:
        sha = known.get(id(segment))
        if sha is None:
            parts = _segment_parts(segment)
            sha = _sha256(parts)
            _write(_path(space_id, sha, ".segment"), parts)
        shas.append(sha)
    listed = LIST_MAGIC + json.dumps({"segments": shas, "patients": after.patients,
                                      "previous": replaces}).encode()
    sha = hashlib.sha256(listed).hexdigest()
    _write(_path(space_id, sha, ".index"), [memoryview(listed)])
    return Written(sha, after, tuple(shas), replaces)


def record(space: PatientSpace, index: Written) -> None:
    """Point the space row at a written index (the caller holds the space lock, and commits)."""
    space.index_sha256, space.index_rows = index.sha256, index.index.patients
    _remember(space.id, index.sha256, index.index, index.shas)


GRACE_SECONDS = 600.0
"""How long an index that the space row no longer records keeps its files (from when the
list that replaced it was written), and how long any file is kept after it was written (a
fold or an upload in another process may have written it and not yet committed)."""


def named(space: PatientSpace, *, grace: float = GRACE_SECONDS) -> set[str] | None:
    """The SHA-256s of the files that a reader may still read: the lists and segments of the
    index the space row records, of the one it replaced, and of each older one replaced less
    than ``grace`` seconds ago. None when the recorded list cannot be read (then nothing may
    be deleted)."""
    keep: set[str] = set()
    sha, cutoff = space.index_sha256, time.time() - grace
    while sha is not None and sha not in keep:
        keep.add(sha)
        try:
            data, path = _read_at(space, sha, (".index", ".npz"))
            written_at = path.stat().st_mtime
        except (IndexCorrupted, FileNotFoundError):
            if sha == space.index_sha256:
                return None
            break
        if not data.startswith(LIST_MAGIC):  # one file from before segments
            break
        listed = json.loads(data[len(LIST_MAGIC):])
        keep.update(listed["segments"])
        if sha != space.index_sha256 and written_at <= cutoff:
            break  # what this list replaced was replaced longer than ``grace`` ago
        sha = listed.get("previous")
    return keep


def collect(space: PatientSpace, *, grace: float = GRACE_SECONDS) -> list[Path]:
    """Delete the space's index files (and abandoned temporary files) that no index a reader
    may still read names (``named``), once ``grace`` seconds have passed since they were
    written; the paths deleted.

    Called after the row moved on (an upload or a fold committed). A reader that loaded a
    list just before the row moved on has ``grace`` seconds to read its segments (the list
    the row records and the one it replaced are kept whatever their age; a fold reading
    without the space lock gives up when a file is gone and the row has moved on)."""
    keep = named(space, grace=grace)
    folder = settings.data_dir / "patients"
    if keep is None or not folder.is_dir():
        return []
    cutoff, removed = time.time() - grace, []
    prefix = f"space-{space.id}-"
    for path in sorted(folder.iterdir()):
        name = path.name.removeprefix(".")  # ".space-...tmp": a writer's temporary file
        if not name.startswith(prefix):
            continue
        if not path.name.startswith(".") and name[len(prefix):].split(".")[0] in keep:
            continue
        try:
            if path.stat().st_mtime > cutoff:
                continue
            path.unlink()
        except FileNotFoundError:  # another process deleted it first
            continue
        removed.append(path)
    return removed
