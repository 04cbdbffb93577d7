"""The patient index (``app.datasets.patients.patient_index.add_dataset``): uploads split the blocks
exactly as set algebra over their ids says, whether the index's segments are compacted at
every upload or never, its files hash to what names them, a tampered or missing file is
refused with nothing changed, ids whose digests are equal are one patient, and digests are
keyed by the space's secret."""

import hashlib
import io
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from app.core.database import Database
from app.core.settings import settings as app_settings
from app.datasets.patients import identity, index_files, index_segments, patient_index
from app.datasets.patients.patient_index import IndexCorrupted
from app.ledger import spaces
from app.ledger.spaces import PatientBlock, PatientSpace, SpaceKind

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

CASES = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data"
    monkeypatch.setattr(app_settings, "data_dir", path)
    return path


def _space(db: Database) -> int:
    """A fresh space with a secret of its own (examples share the database, not patients)."""
    with db.session_scope() as session:
        return spaces.new_space(session=session, kind=SpaceKind.ORGANISATION, epsilon=8.0,
                                delta=1e-6, secret=identity.new_secret(),
                                id_scheme=identity.CURRENT_SCHEME).id


def _ids(patients: set[int] | list[int]) -> pa.Array:
    return pa.array([f"patient-{p}" for p in patients])


def _add(db: Database, space_id: int, dataset_id: int,
         patients: set[int] | list[int]) -> patient_index.Overlap:
    with db.session_scope() as session:
        return patient_index.add_dataset(session=session, space_id=space_id,
                                         dataset_id=dataset_id, ids=_ids(patients))


def _live(db: Database, space_id: int) -> dict[tuple[int, ...], int]:
    with db.session_scope() as session:
        found = Counter[tuple[int, ...]]()
        for block in spaces.live_blocks(session=session, space_id=space_id):
            found[tuple(block.datasets)] += block.size
        return dict(found)


def _state(db: Database, space_id: int) -> tuple[str | None, int, list[tuple]]:
    """What an upload may change: the index's record and every block row."""
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None
        blocks = session.scalars(select(PatientBlock).where(PatientBlock.space_id == space_id)
                                 .order_by(PatientBlock.id))
        return space.index_sha256, space.index_rows, [
            (b.id, tuple(b.datasets), b.size, b.closed_at is None) for b in blocks]


def _index_files(db: Database, space_id: int) -> tuple[Path, list[Path]]:
    """The list the space row names, and its segments' files."""
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.index_sha256 is not None
        folder = app_settings.data_dir / "patients"
        listed = folder / f"space-{space.id}-{space.index_sha256}.index"
    names = index_files.json.loads(listed.read_bytes()[len(index_files.LIST_MAGIC):])
    return listed, [folder / f"space-{space_id}-{sha}.segment" for sha in names["segments"]]


@contextmanager
def _compaction(mode: str) -> Iterator[None]:
    """Segments compacted at every upload, never, or as the service does."""
    bounds = {"every upload": (1, -1.0), "never": (10_000, 1e12), "folded": (2, 1e12)}.get(
        mode, (index_segments.MAX_SEGMENTS, index_segments.LOG_RATIO))
    kept = index_segments.MAX_SEGMENTS, index_segments.LOG_RATIO
    index_segments.MAX_SEGMENTS, index_segments.LOG_RATIO = bounds
    try:
        yield
    finally:
        index_segments.MAX_SEGMENTS, index_segments.LOG_RATIO = kept


uploads = st.lists(st.sets(st.integers(0, 59), min_size=1, max_size=40), min_size=1, max_size=6)


@pytest.mark.parametrize("mode", ["every upload", "never", "folded", "as served"])
@CASES
@given(cohorts=uploads)
def test_uploads_split_blocks_exactly_as_set_algebra_says(
        db: Database, mode: str, cohorts: list[set[int]]) -> None:
    """Each upload's Overlap and the live blocks after it equal a brute-force computation over
    the id sets; the index holds every patient once, in the block of their membership
    pattern, and its files hash to what names them."""
    space_id = _space(db)
    datasets = [100 + k for k in range(len(cohorts))]
    with _compaction(mode):
        for k, (dataset_id, cohort) in enumerate(zip(datasets, cohorts, strict=True)):
            earlier = set().union(*cohorts[:k])
            overlap = _add(db, space_id, dataset_id, cohort)
            assert overlap.patients == len(cohort)
            assert overlap.already_known == len(cohort & earlier)
            assert overlap.new == len(cohort - earlier)
            assert overlap.shared_with == {
                datasets[j]: len(cohort & cohorts[j]) for j in range(k) if cohort & cohorts[j]}
            patterns = {p: tuple(d for d, c in zip(datasets[:k + 1], cohorts, strict=False)
                                 if p in c) for p in earlier | cohort}
            assert _live(db, space_id) == dict(Counter(patterns.values()))

    listed, segments = _index_files(db, space_id)
    if mode == "every upload":
        assert len(segments) == 1
    elif mode == "never":
        assert len(segments) == len(cohorts)
    elif mode == "folded":
        assert len(segments) == min(len(cohorts), 2)
    index_files._last.clear()  # read back from the files, as another process would
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None
        assert hashlib.sha256(listed.read_bytes()).hexdigest() == space.index_sha256
        for path in segments:
            assert hashlib.sha256(path.read_bytes()).hexdigest() in path.name
        rows, everyone = space.index_rows, sorted(patterns)
        block_of = {b.id: tuple(b.datasets) for b in spaces.live_blocks(
            session=session, space_id=space_id)}
        keys, blocks = patient_index.resolved(space)
        words = patient_index.digests(_ids(everyone), space)
    assert len(keys) == rows == len(patterns)
    assert np.all(keys[1:] > keys[:-1])  # a sorted set: each patient once
    digest = dict(zip(words.tolist(), everyone, strict=True))
    assert sorted(digest) == keys.tolist()
    for key, block in zip(keys.tolist(), blocks.tolist(), strict=True):
        assert block_of[block] == patterns[digest[key]]


def test_a_split_block_is_closed_and_its_parts_opened(db: Database) -> None:
    """Blocks are never edited: the split block keeps its size and gets ``closed_at``."""
    space_id = _space(db)
    _add(db, space_id, 1, range(10))
    (_, _, [(first, pattern, size, live)]) = _state(db, space_id)
    assert (pattern, size, live) == ((1,), 10, True)
    _add(db, space_id, 2, range(7, 12))
    _, _, rows = _state(db, space_id)
    assert rows[0] == (first, (1,), 10, False)
    assert sorted(r[1:] for r in rows[1:]) == [((1,), 7, True), ((1, 2), 3, True),
                                               ((2,), 2, True)]


def test_a_re_upload_of_the_same_patients_moves_the_whole_block(db: Database) -> None:
    """No patient stays behind: no empty block is opened for the rest."""
    space_id = _space(db)
    _add(db, space_id, 1, range(20))
    _add(db, space_id, 2, range(20))
    assert _live(db, space_id) == {(1, 2): 20}
    _, _, rows = _state(db, space_id)
    assert len(rows) == 2 and all(size > 0 for _, _, size, _ in rows)


@pytest.mark.parametrize("damage", ["tampered", "missing", "unsorted", "list"])
def test_a_damaged_index_is_refused_and_nothing_changes(db: Database, damage: str) -> None:
    space_id = _space(db)
    with _compaction("never"):
        _add(db, space_id, 1, range(30))
        _add(db, space_id, 2, range(20, 40))
    listed, segments = _index_files(db, space_id)
    path = segments[-1]
    if damage == "tampered":  # one more byte: the file no longer hashes to its name
        path.write_bytes(path.read_bytes() + b"\0")
    elif damage == "missing":
        path.unlink()
    elif damage == "list":  # the list edited: it no longer hashes to the space row's record
        listed.write_bytes(listed.read_bytes().replace(b'"patients": 40', b'"patients": 41'))
    else:  # files that match their names but hold no sorted set (two digests swapped)
        segment = index_files._decode_segment(path.read_bytes())
        keys = segment.keys.copy()
        keys[[0, 1]] = keys[[1, 0]]
        swapped = index_segments.Segment(keys, segment.blocks, segment.moved_from,
                                         segment.moved_to)
        data = b"".join(bytes(part) for part in index_files._segment_parts(swapped))
        sha = hashlib.sha256(data).hexdigest()
        (path.parent / f"space-{space_id}-{sha}.segment").write_bytes(data)
        names = index_files.json.loads(listed.read_bytes()[len(index_files.LIST_MAGIC):])
        names["segments"][-1] = sha
        new_list = index_files.LIST_MAGIC + index_files.json.dumps(names).encode()
        list_sha = hashlib.sha256(new_list).hexdigest()
        (path.parent / f"space-{space_id}-{list_sha}.index").write_bytes(new_list)
        with db.session_scope() as session:
            space = session.get(PatientSpace, space_id)
            assert space is not None
            space.index_sha256 = list_sha
    before, files = _state(db, space_id), sorted(path.parent.iterdir())
    index_files._last.clear()  # a process that did not write it: the files are all it has
    with pytest.raises(IndexCorrupted):
        _add(db, space_id, 3, range(35, 50))
    assert _state(db, space_id) == before
    assert sorted(path.parent.iterdir()) == files  # no new index written


def test_equal_digests_in_one_upload_are_one_patient(db: Database) -> None:
    """Ingest refuses an id that repeats; the words the index is given that still repeat are
    ids whose digests collide, one patient to the index (tests/datasets/test_id_kind.py
    forces such a collision through an upload)."""
    space_id = _space(db)
    _add(db, space_id, 1, range(5))
    overlap = _add(db, space_id, 2, [7, 8, 7, 3])
    assert (overlap.patients, overlap.already_known, overlap.new) == (3, 1, 2)
    assert _live(db, space_id) == {(1,): 4, (1, 2): 1, (2,): 2}


def _keyed(secret: str) -> PatientSpace:
    return PatientSpace(secret=secret, id_scheme=identity.CURRENT_SCHEME)


def test_digests_are_keyed_by_the_space_secret() -> None:
    ids = _ids(range(1000))
    one, other = _keyed(identity.new_secret()), _keyed(identity.new_secret())
    mine = patient_index.digests(ids, one)
    assert mine.dtype == np.uint64 and len(np.unique(mine)) == 1000
    assert np.array_equal(mine, patient_index.digests(ids, one))  # stable: a patient is found
    assert not set(mine.tolist()) & set(patient_index.digests(ids, other).tolist())


def test_a_space_of_one_dataset_keys_no_ids(db: Database) -> None:
    with db.session_scope() as session:
        space_id = spaces.new_space(session=session, kind=SpaceKind.DATASET, epsilon=8.0,
                                    delta=1e-6).id
    with pytest.raises(ValueError, match="keys no ids"):
        _add(db, space_id, 1, range(3))


@pytest.mark.parametrize("written", ["npz", "raw"])
def test_an_index_written_before_segments_still_loads(db: Database, written: str) -> None:
    """Spaces keyed before segments point at one ``.npz`` file, or one raw index file: it is
    read as the base, checked against its SHA-256 like any file, and the next upload writes
    segments and their list."""
    space_id = _space(db)
    _add(db, space_id, 1, range(30))
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None
        keys, blocks = patient_index.resolved(space)
    if written == "npz":
        buffer = io.BytesIO()
        np.savez(buffer, digests=keys, blocks=blocks)
        data, suffix = buffer.getvalue(), ".npz"
    else:
        data = (index_files.INDEX_MAGIC + len(keys).to_bytes(8, "little")
                + keys.astype("<u8").tobytes() + blocks.astype("<i8").tobytes())
        suffix = ".index"
    sha = hashlib.sha256(data).hexdigest()
    (app_settings.data_dir / "patients" / f"space-{space_id}-{sha}{suffix}").write_bytes(data)
    index_files._last.clear()
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None
        space.index_sha256 = sha
        loaded = patient_index.resolved(space)
    assert loaded[0].tolist() == keys.tolist() and loaded[1].tolist() == blocks.tolist()
    assert _add(db, space_id, 2, range(20, 40)).already_known == 10
    assert _live(db, space_id) == {(1,): 20, (1, 2): 10, (2,): 10}
    assert len(_index_files(db, space_id)[1]) >= 1


@pytest.mark.parametrize("key", ["the space's", "another"])
def test_ids_keyed_while_the_body_arrived_count_only_under_the_space_key(
        db: Database, key: str) -> None:
    """Words taken under a key that is no longer the space's (or any other) are not trusted:
    the ids are keyed again, so the blocks are the same either way."""
    space_id = _space(db)
    _add(db, space_id, 1, range(30))
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.secret is not None
        secret = space.secret if key == "the space's" else "0" * 64
        words = patient_index.record_coins.keyed_words(
            _ids(range(20, 40)), secret, scheme=patient_index.record_coins.CURRENT_SCHEME)
        overlap = patient_index.add_dataset(
            session=session, space_id=space_id, dataset_id=2, ids=_ids(range(20, 40)),
            keyed=patient_index.Keyed.of(secret, words, scheme=identity.CURRENT_SCHEME))
    assert (overlap.already_known, overlap.new) == (10, 10)
    assert _live(db, space_id) == {(1,): 20, (1, 2): 10, (2,): 10}


def test_a_large_lookup_runs_in_halves_and_answers_as_one_search(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_search`` splits a large upload's sorted words in two (each still sorted and
    distinct): joined, the halves' answers are the one search's, whichever half the known
    patients fall in."""
    space_id = _space(db)
    _add(db, space_id, 1, range(0, 300))
    _add(db, space_id, 2, range(200, 400))
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.secret is not None
        index = index_files.load(space)
        words = np.sort(patient_index.digests(_ids(range(100, 700)), space))
    monkeypatch.setattr(patient_index, "SPLIT_FROM", 8)
    lookup = patient_index._search(index, words)
    assert len(lookup.parts) == 2
    known, blocks = lookup.result()
    whole_known, whole_blocks = index.blocks_of(words)
    assert np.array_equal(known, whole_known) and np.array_equal(blocks, whole_blocks)
    assert int(known.sum()) == 300 and len(set(blocks.tolist())) == 3  # 1 | 1,2 | 2


@CASES
@given(cohorts=uploads, asked=st.sets(st.integers(0, 79), min_size=1),
       cut=st.floats(0, 1))
def test_a_lookup_of_any_part_of_the_words_answers_as_each_patients_block(
        db: Database, cohorts: list[set[int]], asked: set[int], cut: float) -> None:
    """``blocks_of`` reads only the segment keys within its words' range: each of two parts
    of the words (cut anywhere, as ``_search``'s halves) finds exactly the known patients and
    their live blocks that the compacted index holds, ids outside every cohort unknown."""
    space_id = _space(db)
    with _compaction("never"):
        for k, cohort in enumerate(cohorts):
            _add(db, space_id, 100 + k, cohort)
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.secret is not None
        index = index_files.load(space)
        keys, live = patient_index.resolved(space)
        words = np.sort(patient_index.digests(_ids(sorted(asked)), space))
    truth = dict(zip(keys.tolist(), live.tolist(), strict=True))
    at = int(cut * len(words))
    for part in (words[:at], words[at:]):
        known, blocks = index.blocks_of(part)
        assert part[known].tolist() == [w for w in part.tolist() if w in truth]
        assert blocks.tolist() == [truth[w] for w in part[known].tolist()]
