"""At start-up: move the datasets that migration 0019 left in patient spaces of their own to
where their patients are (``app.datasets.patients.legacy_spaces``), before any release is admitted.

Each dataset moves in a transaction of its own: an upload's stored table is read (its ids keyed
into the organisation's space), a generator dataset's rows are keyed into its seed's space,
and the move is chained in both spaces. A dataset that cannot move (its table no longer reads
as accepted, say) is logged and stays where it is; it takes no release until it moves
(``spaces.check_keyed``), and the next start tries again. Several processes may start at once:
a move re-reads its dataset under the space locks and does nothing once it has moved.
"""

import logging
from pathlib import Path

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.core.database import Database, get_database
from app.core.errors import Conflict
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.datasets.patients import legacy_spaces, patient_ids
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


class NotAwaitingIds(Conflict):
    kind, title = "patient-ids-not-awaited", "The dataset's patients are already keyed"


def rows_awaiting_ids(*, database: Database, dataset_id: int) -> int:
    """The number of rows whose patient ids its steward is to declare.

    Raises:
        DatasetNotFound; NotAwaitingIds: not a private upload with rows in a space of its own
            and no ids (409).
    """
    with database.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        if not legacy_spaces.awaits_ids(dataset):
            raise NotAwaitingIds(
                f"dataset {dataset_id} is not awaiting patient ids: only a private upload "
                "registered before patient spaces, with rows and no id column, takes them; "
                "every other dataset's patients are keyed by its own id column",
                field="dataset_id", state=dataset.state)
        return dataset.n_rows


def declare_ids(*, database: Database, dataset_id: int, body: Path,
                principal: Principal) -> Dataset:
    """Check the ids in ``body`` (one CSV column, the stored rows' order), keep them beside
    the table, and fold the dataset into the organisation's space with its spend, in one
    transaction; then the index's upkeep. Returns the dataset (detached, loaded).

    Raises:
        DatasetNotFound; NotAwaitingIds (409); TableInvalid: an id breaks a rule, repeats,
            or the count is not the rows' (422); nothing is kept then.
    """
    n_rows = rows_awaiting_ids(database=database, dataset_id=dataset_id)
    ids = patient_ids.parse(body, n_rows)
    kept = patient_ids.store(dataset_id, ids)
    try:
        with database.session_scope() as session:
            dataset = dataset_service.get(session=session, dataset_id=dataset_id)
            if not legacy_spaces.awaits_ids(dataset) or dataset.n_rows != n_rows:
                raise NotAwaitingIds(f"dataset {dataset_id} changed while its ids arrived",
                                     field="dataset_id", state=dataset.state)
            dataset.patient_ids_sha256 = kept
            session.flush()  # the fold re-reads the dataset under its locks
            legacy_spaces.fold_upload(session=session, dataset_id=dataset_id)
            audit.record(session=session, principal=principal,
                         action=Action.PATIENT_IDS_DECLARED, target=f"dataset/{dataset_id}",
                         detail={"rows": n_rows})
            session.flush()
            session.refresh(dataset)
            session.expunge(dataset)
    except BaseException:
        patient_ids.discard(dataset_id, kept)
        raise
    if dataset.patient_space_id is not None:
        index_upkeep.after_upload(space_id=dataset.patient_space_id)
    return dataset
