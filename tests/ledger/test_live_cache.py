"""An upload's block changes without re-reading or re-encoding its blocks: the live blocks an
upload of this process left are used by the next one only while the space's chain head is the
record that upload appended (``app.ledger.live_cache``), and an upload's chain record is
written as text from the blocks' canonical parts (``space_chain.upload_change``), exactly
``block_change``'s canonical JSON."""

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.database import Database
from app.datasets import patient_index
from app.ledger import live_cache, space_chain, spaces
from app.ledger.hashing import canonical_json
from app.ledger.spaces import UploadBlocks
from tests.datasets.test_patient_index import _add, _data_dir, _ids, _live, _space

pytestmark = pytest.mark.usefixtures(_data_dir.__name__)  # index files under tmp_path

CASES = settings(max_examples=200, deadline=None, derandomize=True, database=None)

datasets_lists = st.lists(st.integers(1, 10**6), min_size=1, max_size=8, unique=True).map(sorted)
SPELLINGS = ["none", "spaced", "compact", "newline", "padded"]


def _spelled(datasets: list[int], spelling: str) -> str | None:
    """A block's datasets as a driver may hand them back: no text (PostgreSQL), SQLAlchemy's
    spacing, compact, or whitespace JSON allows that is not spaces."""
    return {"none": None, "spaced": json.dumps(datasets),
            "compact": json.dumps(datasets, separators=(",", ":")),
            "newline": "[" + ",\n".join(map(str, datasets)) + "]",
            "padded": "[ " + " , ".join(map(str, datasets)) + " ]"}[spelling]


@CASES
@given(opened=st.lists(st.tuples(datasets_lists, st.integers(1, 10**6),
                                 st.sampled_from(SPELLINGS)), max_size=30),
       closed=st.lists(st.integers(1, 10**6), unique=True, max_size=30),
       dataset_id=st.integers(1, 10**6), order=st.randoms(use_true_random=False))
def test_an_uploads_record_text_is_the_canonical_block_change(
        opened: list[tuple[list[int], int, str]], closed: list[int], dataset_id: int,
        order: Any) -> None:
    ids = list(range(1, len(opened) + 1))
    order.shuffle(ids)  # whatever order the blocks come in, the record lists them by id
    rows = [(block, datasets, size) for block, (datasets, size, _) in zip(ids, opened,
                                                                          strict=True)]
    live = {block: (datasets, size, _spelled(datasets, spelling))
            for block, (datasets, size, spelling) in zip(ids, opened, strict=True)}
    placed = UploadBlocks({}, {}, None, closed, rows, live)
    text = space_chain.upload_change(dataset_id, placed).text
    expected = space_chain.block_change(dataset_id=dataset_id, closed=closed, opened=rows)
    assert text == canonical_json(expected)
    assert json.loads(text) == expected


def test_the_next_upload_uses_the_blocks_the_last_left_only_while_its_record_is_the_head(
        any_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    db = any_db
    reads: list[int] = []
    read = spaces.live_block_lists

    def counted(**kwargs: Any) -> spaces.LiveBlocks:
        reads.append(kwargs["space_id"])
        return read(**kwargs)

    monkeypatch.setattr(spaces, "live_block_lists", counted)
    live_cache.forget()
    space_id = _space(db)
    cohorts = {101: set(range(0, 40)), 102: set(range(20, 60)), 103: set(range(10, 50)),
               104: set(range(0, 60, 3)), 105: set(range(30, 80))}
    _add(db, space_id, 101, cohorts[101])
    _add(db, space_id, 102, cohorts[102])
    assert reads == [space_id]  # the second upload used what the first left

    with db.session_scope() as session:  # another writer moves the head (a budget record)
        space = spaces.lock_space(session=session, space_id=space_id)
        space_chain.append_budget(session=session, space=space)
    _add(db, space_id, 103, cohorts[103])
    assert reads == [space_id] * 2

    with pytest.raises(RuntimeError, match="rolled back"), db.session_scope() as session:
        patient_index.add_dataset(session=session, space_id=space_id, dataset_id=999,
                                  ids=_ids(list(range(80))))
        raise RuntimeError("rolled back")
    _add(db, space_id, 104, cohorts[104])  # the rolled-back record is not the head
    _add(db, space_id, 105, cohorts[105])
    assert reads == [space_id] * 3

    everyone = set().union(*cohorts.values())
    patterns = Counter(tuple(d for d in sorted(cohorts) if p in cohorts[d]) for p in everyone)
    assert _live(db, space_id) == dict(patterns)
    with db.session_scope() as session:
        space = session.get(spaces.PatientSpace, space_id)
        assert space is not None
        assert space_chain.verify(session=session, space=space).valid
