"""The live blocks an upload in this process left, kept under the chain head that follows them.

Every change of a space's blocks appends a record to the space's chain in the same
transaction (``spaces.apply_upload`` and ``spaces.open_block`` are chained by their callers,
and ``space_chain.verify`` checks that the live blocks are those the chain leaves). So when
the space row, read under its lock, names as its head the record an upload of this process
appended, the space's live blocks are still the ones that upload left: the next upload uses
them instead of reading its thousands of rows and their JSON again (10-20 ms of a
million-row accept that splits 6,310 blocks). A rolled-back upload's record never becomes the
head, so its entry is never used; another process's upload or budget change moves the head.
"""

import threading

from app.ledger.spaces import LiveBlocks

_last: dict[int, tuple[str, LiveBlocks]] = {}
_guard = threading.Lock()


def take(space_id: int, head_hash: str) -> LiveBlocks | None:
    """The live blocks kept for the space if its head is still ``head_hash`` (the caller
    holds the space lock and read the head under it); the entry is removed either way, so
    the caller owns what it gets (it may build the next state from it)."""
    with _guard:
        found = _last.pop(space_id, None)
    return found[1] if found is not None and found[0] == head_hash else None


def keep(space_id: int, head_hash: str, live: LiveBlocks) -> None:
    """Remember ``live`` as the space's live blocks once the record ``head_hash`` is its
    head (the caller appended that record under the space lock, not yet committed)."""
    with _guard:
        _last[space_id] = (head_hash, live)


def forget(space_id: int | None = None) -> None:
    """Drop what is kept (one space's, or all: tests that rewrite a database in place)."""
    with _guard:
        if space_id is None:
            _last.clear()
        else:
            _last.pop(space_id, None)
