"""Folding a space's patient index after an upload has committed, and deleting the files that
no recorded index names any more.

An upload appends its segment and commits (``patient_index.add_dataset``); folding the log
(``Index.folded``: on 5 million patients, a second and a few hundred MiB) is done after that,
off the request (``app.flows.index_upkeep``), in three steps that never leave the row naming
anything but a whole, checked index:

1. ``fold``: read the index the space row records (no lock held), fold it and write its
   files (segments and list, named by their SHA-256). A crash here leaves unused files; the
   row still names the old index, whose files are all still there.
2. ``record``: in its own short transaction, under the space lock, point the row at the
   folded index if the row still records the index that was folded. Otherwise an upload (or
   another process's fold) moved it on meanwhile: the fold lost the race and changes nothing.
   The folded index holds the same patients in the same blocks, so readers see the same
   answers from either.
3. ``collect``: after that commit (or an upload's), delete the space's files that neither the
   recorded index nor the one it replaced names, once they are older than a grace period
   (``index_files.collect``).
"""

from pathlib import Path

from sqlalchemy.orm import Session

from app.datasets.patients import index_files
from app.datasets.patients.index_files import GRACE_SECONDS, Written
from app.ledger import spaces
from app.ledger.spaces import PatientSpace

__all__ = ["GRACE_SECONDS", "Written", "collect", "fold", "record"]


def fold(space: PatientSpace) -> Written | None:
    """The index that ``space`` (the row as read, no lock held) records, folded, its files
    written; None when its log is within its bounds (``Index.needs_fold``).

    Raises:
        IndexCorrupted: a file is missing or does not match what names it (the row may have
            moved on and its old files been deleted: the caller checks).
    """
    index = index_files.load(space)
    if not index.needs_fold():
        return None
    return index_files.written(space.id, space.index_sha256, index, index.folded())


def record(*, session: Session, space_id: int, folded: Written) -> bool:
    """Point the space row at ``folded`` under the space lock, in the caller's (short)
    transaction, if the row still records the index it was folded from; whether it did."""
    space = spaces.lock_space(session=session, space_id=space_id)
    if (space.index_sha256, space.index_rows) != (folded.previous, folded.index.patients):
        return False  # an upload or another fold moved the row on: this fold is stale
    index_files.record(space, folded)
    return True


def collect(*, session: Session, space_id: int, grace: float = GRACE_SECONDS) -> list[Path]:
    """Delete the space's index files that neither its recorded index nor the one that index
    replaced names (``index_files.collect``), after the row has moved on and committed; the
    paths deleted. Reads the committed row: files of an upload not yet committed are younger
    than ``grace`` and stay."""
    space = session.get(PatientSpace, space_id, populate_existing=True)
    return [] if space is None else index_files.collect(space, grace=grace)
