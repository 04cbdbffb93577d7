"""The patient index's fold after an upload commits (``app.datasets.patients.index_fold``,
``app.flows.index_upkeep``): an upload only appends its segment and the fold runs after its
commit, off the request; a fold that loses the race to an upload changes nothing; the files
no recorded index names are deleted, never those a reader may still read; readers during
folds always see an index that matches its row and the set algebra of its uploads."""

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select
from sqlalchemy.orm import undefer

from app.core.database import Database, set_database
from app.core.settings import settings as app_settings
from app.datasets.patients import identity, index_files, index_fold, index_segments, patient_index
from app.datasets.patients.index_files import IndexCorrupted
from app.flows import index_upkeep
from app.ledger import spaces
from app.ledger.spaces import PatientBlock, PatientSpace, SpaceKind
from tests.ledger import patient_world


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data"
    monkeypatch.setattr(app_settings, "data_dir", path)
    return path


def _space(db: Database) -> int:
    with db.session_scope() as session:
        return spaces.new_space(session=session, kind=SpaceKind.ORGANISATION, epsilon=8.0,
                                delta=1e-6, secret=identity.new_secret(),
                                id_scheme=identity.CURRENT_SCHEME).id


def _ids(patients: set[int] | range) -> pa.Array:
    return pa.array([f"patient-{p}" for p in sorted(patients)])


def _add(db: Database, space_id: int, dataset_id: int, patients: set[int] | range) -> None:
    with db.session_scope() as session:
        patient_index.add_dataset(session=session, space_id=space_id, dataset_id=dataset_id,
                                  ids=_ids(patients))


def _row(db: Database, space_id: int) -> PatientSpace:
    """The space row as committed now (detached: ``expire_on_commit`` is off), its id scheme
    loaded (a deferred column)."""
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id, populate_existing=True,
                            options=[undefer(PatientSpace.id_scheme)])
        assert space is not None and space.index_sha256 is not None
        return space


def _folder() -> Path:
    return app_settings.data_dir / "patients"


def _listed(space_id: int, sha: str) -> dict:
    data = (_folder() / f"space-{space_id}-{sha}.index").read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha
    return json.loads(data[len(index_files.LIST_MAGIC):])


def _patterns(db: Database, space: PatientSpace,
              cohorts: dict[int, set[int]]) -> dict[int, tuple[int, ...]]:
    """Each patient's datasets as the index the row ``space`` records says (read from its
    files, not this process's cache), checked against the set algebra of the datasets that
    index holds; the patients' patterns."""
    index_files._last.pop(space.id, None)
    keys, blocks = patient_index.resolved(space)
    with db.session_scope() as session:  # blocks are never edited: their lists are stable
        lists = dict(session.execute(select(PatientBlock.id, PatientBlock.datasets)
                                     .where(PatientBlock.space_id == space.id)).all())
    seen = sorted({d for b in set(blocks.tolist()) for d in lists[b]})
    everyone = sorted(set().union(*(cohorts[d] for d in seen)))
    assert space.secret is not None and len(keys) == len(everyone) == space.index_rows
    digest = dict(zip(patient_index.digests(_ids(set(everyone)), space).tolist(),
                      [f"patient-{p}" for p in sorted(everyone)], strict=True))
    found = {int(digest[k].split("-")[1]): tuple(lists[b])
             for k, b in zip(keys.tolist(), blocks.tolist(), strict=True)}
    assert found == {p: tuple(d for d in seen if p in cohorts[d]) for p in everyone}
    return found


COHORTS = {1: set(range(20)), 2: set(range(10, 200)), 3: set(range(150, 260))}


def test_an_upload_appends_and_the_fold_after_its_commit_compacts(db: Database) -> None:
    """The second upload's log outgrows the base (190 > 4 x 20 rows): the upload appends
    anyway; the upkeep folds it into one base, recorded on the row with the same patients."""
    space_id = _space(db)
    _add(db, space_id, 1, COHORTS[1])
    _add(db, space_id, 2, COHORTS[2])
    appended = _row(db, space_id)
    assert len(_listed(space_id, appended.index_sha256)["segments"]) == 2
    assert index_files.load(appended).needs_fold()
    before = _patterns(db, appended, COHORTS)

    assert index_upkeep.upkeep(database=db, space_id=space_id)
    folded = _row(db, space_id)
    listed = _listed(space_id, folded.index_sha256)
    assert folded.index_sha256 != appended.index_sha256
    assert len(listed["segments"]) == 1 and listed["previous"] == appended.index_sha256
    assert folded.index_rows == appended.index_rows == 200
    assert _patterns(db, folded, COHORTS) == before
    assert not index_upkeep.upkeep(database=db, space_id=space_id)  # nothing left to fold
    assert _row(db, space_id).index_sha256 == folded.index_sha256
    _add(db, space_id, 3, COHORTS[3])  # the next upload looks its patients up in the base
    _patterns(db, _row(db, space_id), COHORTS)


def test_the_upload_flow_returns_before_the_fold(db: Database, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the flow the route calls: while the fold is held, the upload has already
    committed and answered with its segment appended; the fold then records the base."""
    gate, held = threading.Event(), threading.Event()
    real_fold = index_fold.fold

    def slow_fold(space: PatientSpace) -> index_files.Written | None:
        held.set()
        assert gate.wait(timeout=30)
        return real_fold(space)

    monkeypatch.setattr(index_fold, "fold", slow_fold)
    set_database(db)
    try:
        world = patient_world.World(db=db, folder=tmp_path, tag="fold")
        first = patient_world.upload(world, 8.0, [f"p{i}" for i in range(160)])
        second = patient_world.upload(world, 8.0, [f"p{i}" for i in range(100, 1000)])
        assert held.wait(timeout=30)
        with db.session_scope() as session:
            space = spaces.organisation(session=session)
            appended = space.index_sha256
        assert appended is not None
        assert len(_listed(space.id, appended)["segments"]) == 2  # answered, not folded
        gate.set()
        assert index_upkeep.wait_idle(timeout=30)
    finally:
        gate.set()
        set_database(None)
    space = _row(db, space.id)
    assert len(_listed(space.id, space.index_sha256)["segments"]) == 1
    assert _listed(space.id, space.index_sha256)["previous"] == appended
    assert world.patterns() == {(first,): 100, (first, second): 60, (second,): 840}
    with db.session_scope() as session:
        live = spaces.live_blocks(session=session, space_id=space.id)
        assert {tuple(b.datasets): b.size for b in live} == dict(world.patterns())


def test_a_fold_that_loses_the_race_changes_nothing(db: Database) -> None:
    """A fold computed from the index before an upload committed is not recorded; until the
    row moves, the index it names is whole (a crash after the fold's files were written
    leaves it so); the stale fold's files are deleted later."""
    space_id = _space(db)
    _add(db, space_id, 1, COHORTS[1])
    _add(db, space_id, 2, COHORTS[2])
    read = _row(db, space_id)
    stale = index_fold.fold(read)
    assert stale is not None and stale.previous == read.index_sha256
    assert _row(db, space_id).index_sha256 == read.index_sha256  # written, not recorded
    _patterns(db, read, COHORTS)  # "crashed" here: the recorded index still loads whole
    _add(db, space_id, 3, COHORTS[3])
    moved = _row(db, space_id)
    with db.session_scope() as session:
        assert not index_fold.record(session=session, space_id=space_id, folded=stale)
    assert _row(db, space_id).index_sha256 == moved.index_sha256
    _patterns(db, moved, COHORTS)
    with db.session_scope() as session:
        removed = index_fold.collect(session=session, space_id=space_id, grace=0.0)
    assert _folder() / f"space-{space_id}-{stale.sha256}.index" in removed
    assert not (_folder() / f"space-{space_id}-{stale.shas[0]}.segment").exists()


def test_an_upkeep_that_an_upload_overtakes_records_nothing(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    space_id = _space(db)
    _add(db, space_id, 1, COHORTS[1])
    _add(db, space_id, 2, COHORTS[2])
    real_fold = index_fold.fold

    def overtaken(space: PatientSpace) -> index_files.Written | None:
        folded = real_fold(space)
        _add(db, space_id, 3, COHORTS[3])  # commits while the fold holds no lock
        return folded

    monkeypatch.setattr(index_fold, "fold", overtaken)
    assert not index_upkeep.upkeep(database=db, space_id=space_id)
    space = _row(db, space_id)
    assert len(_listed(space_id, space.index_sha256)["segments"]) == 3
    _patterns(db, space, COHORTS)


def test_an_upload_folds_itself_only_past_max_segments(db: Database) -> None:
    """With no upkeep at all, the log never holds more than ``MAX_SEGMENTS`` segments."""
    space_id = _space(db)
    _add(db, space_id, 1, range(1000))
    cohorts = {1: set(range(1000))}
    for k in range(2, 2 + 2 * index_segments.MAX_SEGMENTS):
        cohorts[k] = set(range(10 * k, 10 * k + 15))
        _add(db, space_id, k, cohorts[k])
        space = _row(db, space_id)
        count = len(_listed(space_id, space.index_sha256)["segments"])
        assert count == (k if k <= index_segments.MAX_SEGMENTS else count)
        assert count <= index_segments.MAX_SEGMENTS
    _patterns(db, space, cohorts)


def _generations(db: Database, space_id: int) -> list[str]:
    """Uploads and folds: the list SHA-256s the row recorded, oldest first."""
    recorded = []
    for dataset_id, cohort in COHORTS.items():
        _add(db, space_id, dataset_id, cohort)
        recorded.append(_row(db, space_id).index_sha256)
        if index_upkeep.upkeep(database=db, space_id=space_id, grace=1e9):
            recorded.append(_row(db, space_id).index_sha256)
    return recorded


def _named_by(space_id: int, shas: list[str]) -> set[str]:
    return {*shas, *(s for sha in shas for s in _listed(space_id, sha)["segments"])}


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_files_no_readable_index_names_are_deleted(db: Database) -> None:
    """Deleted: what neither the recorded index nor the one it replaced names, once older
    than the grace period (stale temporary files too); kept: both of those whatever their
    age, an older index replaced within the grace period, fresh files, other spaces'."""
    other = _space(db)
    _add(db, other, 1, range(5))
    space_id = _space(db)
    recorded = _generations(db, space_id)
    assert len(recorded) >= 4
    folder, grace = _folder(), index_fold.GRACE_SECONDS
    stale_tmp = folder / f".space-{space_id}-{'0' * 64}.segment.{'ab' * 8}.tmp"
    stale_tmp.write_bytes(b"partial")
    everything = sorted(folder.iterdir())
    for path in everything:
        _age(path, 2 * grace)
    fresh = folder / f"space-{space_id}-{'f' * 64}.segment"  # another writer's, uncommitted
    fresh.write_bytes(b"not yet recorded")

    mine = [p for p in everything if p.name.startswith(f"space-{space_id}-")]

    def unnamed(generations: list[str]) -> list[Path]:
        keep = _named_by(space_id, generations)
        return sorted(p for p in mine if p.name.split("-")[2].split(".")[0] not in keep)

    three, two = unnamed(recorded[-3:]), unnamed(recorded[-2:])
    _age(folder / f"space-{space_id}-{recorded[-2]}.index", 0)  # it replaced one just now
    with db.session_scope() as session:
        removed = index_fold.collect(session=session, space_id=space_id)
    assert sorted(removed) == sorted([stale_tmp, *three])
    _age(folder / f"space-{space_id}-{recorded[-2]}.index", 2 * grace)
    with db.session_scope() as session:
        removed = index_fold.collect(session=session, space_id=space_id)
    assert sorted(removed) == sorted(set(two) - set(three)) and removed
    keep = _named_by(space_id, recorded[-2:])
    assert removed and fresh.exists() and not stale_tmp.exists()
    assert all(p.exists() for p in everything if p.name.startswith(f"space-{other}-"))
    assert sorted(p.name.split("-")[2].split(".")[0] for p in folder.iterdir()
                  if p.name.startswith(f"space-{space_id}-") and p != fresh) == sorted(keep)
    current = _row(db, space_id)
    _patterns(db, current, COHORTS)
    previous = PatientSpace(id=space_id, secret=current.secret, id_scheme=current.id_scheme,
                            index_rows=_listed(space_id, recorded[-2])["patients"],
                            index_sha256=recorded[-2])
    _patterns(db, previous, COHORTS)  # a reader that read the row before it moved on


def test_nothing_is_deleted_while_the_recorded_list_is_unreadable(db: Database) -> None:
    space_id = _space(db)
    recorded = _generations(db, space_id)
    (_folder() / f"space-{space_id}-{recorded[-1]}.index").unlink()
    files = sorted(_folder().iterdir())
    with db.session_scope() as session:
        assert index_fold.collect(session=session, space_id=space_id, grace=0.0) == []
    assert sorted(_folder().iterdir()) == files


def test_readers_during_folds_see_a_whole_recorded_index(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers load the index the row records, from its files, while uploads commit and the
    upkeep folds (often: tight bounds) and deletes (no grace): each read holds the row's
    patients in the blocks the set algebra of its uploads says; a file is missing only once
    the row has moved on."""
    monkeypatch.setattr(index_segments, "LOG_RATIO", 1.0)
    monkeypatch.setattr(index_segments, "MAX_SEGMENTS", 3)
    space_id = _space(db)
    cohorts = {k: set(range(25 * k, 25 * k + 60)) for k in range(1, 13)}
    stop, reads, failures, moved_on = threading.Event(), [0], list[str](), [0]

    def reader() -> None:
        while not stop.is_set():
            with db.session_scope() as session:
                space = session.get(PatientSpace, space_id, populate_existing=True,
                                    options=[undefer(PatientSpace.id_scheme)])
                assert space is not None
            if space.index_sha256 is None:
                continue
            try:
                _patterns(db, space, cohorts)
                reads[0] += 1
            except IndexCorrupted:
                if _row(db, space_id).index_sha256 == space.index_sha256:
                    failures.append(f"the recorded index {space.index_sha256[:12]} lost a file")
                moved_on[0] += 1
            except AssertionError as wrong:  # noqa: PERF203  # reported below
                failures.append(str(wrong)[:300])

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        folds = 0
        for dataset_id, cohort in cohorts.items():
            _add(db, space_id, dataset_id, cohort)
            folds += index_upkeep.upkeep(database=db, space_id=space_id, grace=0.0)
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not failures, failures[:3]
    assert folds >= 4 and reads[0] >= 10, (folds, reads, moved_on)
    _patterns(db, _row(db, space_id), cohorts)


def test_a_fold_by_ranges_of_keys_means_what_its_segments_mean(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Random segments (repeated keys, moves) folded a few keys at a time: each key once,
    in the block a brute-force walk gives (its newest segment's block, carried through every
    later segment's moves), and the moves composed."""
    rng = np.random.default_rng(29)
    for _ in range(200):
        segments = []
        for _ in range(int(rng.integers(1, 6))):
            keys = np.unique(rng.integers(0, 300, int(rng.integers(0, 80))).astype(np.uint64))
            moved = np.unique(rng.integers(1, 40, int(rng.integers(0, 5))))
            segments.append(index_segments.Segment(
                keys, rng.integers(1, 40, len(keys)), moved, rng.integers(1, 40, len(moved))))
        expected: dict[int, int] = {}
        for number, segment in enumerate(segments):
            for key, block in zip(segment.keys.tolist(), segment.blocks.tolist(), strict=True):
                for later in segments[number + 1:]:
                    moves = dict(zip(later.moved_from.tolist(), later.moved_to.tolist(),
                                     strict=True))
                    block = moves.get(block, block)
                expected[key] = block
        monkeypatch.setattr(index_segments, "FOLD_PART", int(rng.integers(1, 9)))
        folded = index_segments.fold(segments, base=True, size=len(expected))
        assert folded.keys.tolist() == sorted(expected)
        assert folded.blocks.tolist() == [expected[k] for k in sorted(expected)]
        logged = index_segments.fold(segments, base=False)
        assert logged.keys.tolist() == folded.keys.tolist()
        assert logged.moved_from.tolist() == sorted(
            set().union(*(s.moved_from.tolist() for s in segments)))
        with pytest.raises(ValueError, match="patients"):
            index_segments.fold(segments, base=True, size=len(expected) + 1)
