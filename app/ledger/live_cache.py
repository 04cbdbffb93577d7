"""The live blocks an upload in this process left, kept under the chain head that follows them.

Every change of a space's blocks appends a record to the space's chain in the same transaction
(``spaces.apply_upload`` and ``spaces.open_block`` are chained by their callers, and
``space_chain.verify`` checks that the live blocks are those the chain leaves). So when the
space row, read under its lock, names as its head the record an upload of this process appended,
the space's live blocks are still the ones that upload left: the next upload uses them instead
of reading its thousands of rows and their JSON again (a share of the accept, which runs alone,
when an upload splits thousands of blocks). A rolled-back upload's record never becomes the
head, so its entry is never used; another process's upload or budget change moves the head.
"""

import threading

from sqlalchemy.orm import Session

from app.ledger import spaces
from app.ledger.spaces import LiveBlocks, PatientSpace

_last: dict[int, tuple[str, LiveBlocks]] = {}
_guard = threading.Lock()


def live_blocks(*, session: Session, space: PatientSpace) -> LiveBlocks:
    """The space's live blocks, ``space`` as read under its lock: those the last upload of
    this process left while its record is still the head, else read. The entry is removed
    either way, so the caller owns what it gets (it may build the next state from it)."""
    with _guard:
        found = _last.pop(space.id, None)
    if found is not None and found[0] == space.chain_head_hash:
        return found[1]
    return spaces.live_block_lists(session=session, space_id=space.id)


def keep(space_id: int, head_hash: str, live: LiveBlocks) -> None:
    """Remember ``live`` as the space's live blocks once the record ``head_hash`` is its
    head (``space_chain.append_upload``, under the space lock, before the commit)."""
    with _guard:
        _last[space_id] = (head_hash, live)


def forget() -> None:
    """Drop what is kept (tests that edit block rows directly, as another process would)."""
    with _guard:
        _last.clear()
