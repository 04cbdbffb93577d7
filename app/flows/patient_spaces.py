"""At start-up: move the datasets that migration 0019 left in patient spaces of their own to
where their patients are (``app.datasets.legacy_spaces``), before any release is admitted.

Each dataset moves in a transaction of its own: an upload's stored table is read (its ids keyed
into the organisation's space), a generator dataset's rows are keyed into its seed's space,
and the move is chained in both spaces. A dataset that cannot move (its table no longer reads
as accepted, say) is logged and stays where it is; it takes no release until it moves
(``spaces.check_keyed``), and the next start tries again. Several processes may start at once:
a move re-reads its dataset under the space locks and does nothing once it has moved.
"""

import logging

from app.core.database import Database, get_database
from app.datasets import legacy_spaces
from app.datasets.models import Dataset
from app.flows import index_upkeep

log = logging.getLogger(__name__)


def fold_legacy(*, database: Database) -> list[int]:
    """Move every dataset ``legacy_spaces.pending`` names; the ids of those moved."""
    with database.session_scope() as session:
        found = legacy_spaces.pending(session=session)
    moved, spaces_changed = [], set()
    for dataset_id in found:
        try:
            with database.session_scope() as session:
                dataset = session.get(Dataset, dataset_id)
                fold = (legacy_spaces.fold_generator if dataset is not None
                        and dataset.source_kind == "synthetic" else legacy_spaces.fold_upload)
                overlap = fold(session=session, dataset_id=dataset_id)
                space_id = None if dataset is None else dataset.patient_space_id
        except Exception:  # noqa: BLE001  # logged; it takes no release until it moves
            log.exception("dataset %s could not join its patients' space", dataset_id)
            continue
        if overlap is not None and space_id is not None:
            moved.append(dataset_id)
            spaces_changed.add(space_id)
    for space_id in sorted(spaces_changed):  # committed: their indexes' fold, off the start
        index_upkeep.after_upload(space_id=space_id)
    return moved


def on_startup() -> None:
    """``fold_legacy`` on the process's database."""
    moved = fold_legacy(database=get_database())
    if moved:
        log.info("datasets %s joined their patients' spaces", moved)
