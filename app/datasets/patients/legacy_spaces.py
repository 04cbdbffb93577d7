"""Datasets that migration 0019 left in patient spaces of their own, moved to where their
patients are.

Every private dataset's patients belong in a space that other tables' releases on them are
found in: an upload's in the organisation's space (keyed by their ids), a generator dataset's
in its seed's (``app.datasets.patients.generator_space``). Migration 0019 gave each dataset of its
time a space of its own (``SpaceKind.DATASET``); a release there could never see another table's
spend on the same patients, a second budget. So:

- a registration still awaiting its rows joins the organisation's space before they arrive
  (``join_organisation``, at its upload's claim); one without an id column is refused then,
  since its rows could not be keyed;
- an upload holding rows is folded in (``fold_upload``): its stored table's ids are keyed into
  the organisation's space as an upload's are, its own block is closed, and both spaces'
  chains record the move, so ``space_chain.verify`` still verifies each; from then on its
  ledger entries count for its patients' blocks, as any dataset's do;
- a generator dataset is folded into its seed's space the same way (``fold_generator``), its
  row indices as ids.

A dataset left in its own space (an upload without ids, or whose table could not be read back)
takes no release (``spaces.check_keyed``). Folding is idempotent: each fold re-reads the
dataset under the space locks and does nothing once it has moved.
"""

from sqlalchemy import func, select
from sqlalchemy.orm import Session, object_session

from app.datasets.intake.stored import load_table
from app.datasets.models import AWAITING_DATA, READY, Dataset
from app.datasets.patients import generator_space, patient_ids, patient_index
from app.ledger import space_chain, spaces
from app.ledger.errors import PatientIdsRequired
from app.ledger.spaces import PatientSpace, SpaceKind


def pending(*, session: Session) -> list[int]:
    """The private datasets still in a space of their own that can be moved now: generator
    datasets (any state: their spend so far is on their seed's rows), uploads awaiting their
    rows with an id column, and ready uploads with one; by id."""
    found = session.scalars(
        select(Dataset).join(PatientSpace, PatientSpace.id == Dataset.patient_space_id)
        .where(PatientSpace.kind == SpaceKind.DATASET).order_by(Dataset.id)).all()
    return [dataset.id for dataset in found if dataset.source_kind == "synthetic"
            or (dataset.source_kind == "upload" and dataset.state in (AWAITING_DATA, READY)
                and _declares_ids(dataset))]


def _declares_ids(dataset: Dataset) -> bool:
    """Its schema has an id column, or its steward declared its rows' ids since."""
    schema_json = dataset.schema_json
    return dataset.patient_ids_sha256 is not None or (
        isinstance(schema_json, dict) and schema_json.get("id_column") is not None)


def awaits_ids(dataset: Dataset) -> bool:
    """A private upload with rows in a space of its own whose ids nobody declared: the one
    kind of dataset whose steward declares them (``app.datasets.patients.patient_ids``)."""
    return (dataset.source_kind == "upload" and not dataset.public
            and dataset.state == READY and _own_space(dataset) is not None
            and not _declares_ids(dataset))


def _own_space(dataset: Dataset) -> PatientSpace | None:
    """The dataset's space when it is one of its own (``SpaceKind.DATASET``)."""
    session = object_session(dataset)
    space = (None if dataset.patient_space_id is None or session is None
             else session.get(PatientSpace, dataset.patient_space_id))
    return space if space is not None and space.kind == SpaceKind.DATASET else None


def join_organisation(*, session: Session, dataset: Dataset) -> None:
    """Move a private upload registered before spaces, with no rows yet, into the
    organisation's space, so that its rows are keyed there when they arrive (its own space
    holds nothing live: nothing to chain). Nothing for any other dataset.

    Raises:
        PatientIdsRequired: its schema declares no id column: its rows could not be keyed
            (409; the steward registers the table again with one).
    """
    own = _own_space(dataset)
    if own is None or dataset.source_kind != "upload" or dataset.public:
        return
    if spaces.live_blocks(session=session, space_id=own.id):
        return  # it had rows: ``fold_upload`` moves it, with them
    if not _declares_ids(dataset):
        raise PatientIdsRequired(
            f"dataset {dataset.id} was registered before patient spaces without a patient id "
            "column: a private upload's patients are keyed into the organisation's patient "
            "space by their ids, so its rows cannot be taken. A data steward withdraws this "
            f"registration (DELETE /v1/datasets/{dataset.id}) and registers the table again "
            "with its schema's id_column", field="dataset_id", state=dataset.state)
    dataset.patient_space_id = spaces.organisation(session=session).id
    session.flush()


def _locked_own(session: Session, dataset_id: int) -> tuple[Dataset, PatientSpace] | None:
    """The organisation's space lock (the order every move takes: it, then the dataset's own
    space), then the dataset re-read under its own space's lock; None once it has moved."""
    spaces.lock_space(session=session, space_id=spaces.organisation(session=session).id)
    dataset = session.get(Dataset, dataset_id, populate_existing=True)
    own = None if dataset is None else _own_space(dataset)
    if dataset is None or own is None:
        return None
    own = spaces.lock_space(session=session, space_id=own.id)
    session.refresh(dataset)
    if dataset.patient_space_id != own.id:
        return None
    return dataset, own


def _leave(session: Session, dataset: Dataset, own: PatientSpace) -> None:
    """Close the dataset's live blocks in its own space and chain that: its patients' spend
    is counted where they go next."""
    closed = [block.id for block in spaces.blocks_of(session=session, space_id=own.id,
                                                     dataset_id=dataset.id)]
    if closed:
        spaces.close_blocks(session=session, space_id=own.id, block_ids=closed)
        space_chain.append_closed(session=session, space=own, dataset_id=dataset.id,
                                  closed=closed)


def fold_upload(*, session: Session, dataset_id: int) -> patient_index.Overlap | None:
    """Key a ready upload's patients (its stored table's ids) into the organisation's space,
    in the caller's transaction; None when it is not (or no longer) in a space of its own,
    or declares no ids. An upload still awaiting rows joins as ``join_organisation`` does.

    Raises:
        StoredTableMismatch: its stored table no longer reads as accepted (nothing changes).
        InvalidRequest: two rows have one patient id (422; nothing changes).
        IndexCorrupted: the organisation's index does not match its record (nothing changes).
    """
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or _own_space(dataset) is None \
            or not _declares_ids(dataset):
        return None
    if dataset.state == AWAITING_DATA:
        join_organisation(session=session, dataset=dataset)
        return None
    if dataset.state != READY:
        return None
    ids = patient_ids.of(dataset, load_table(dataset).ids)  # read before any lock is taken
    locked = _locked_own(session, dataset_id)
    if locked is None:
        return None
    dataset, own = locked
    if len(ids) != dataset.n_rows:
        raise ValueError(f"dataset {dataset.id}'s table holds {len(ids)} ids for "
                         f"{dataset.n_rows} rows")
    _leave(session, dataset, own)
    dataset.patient_space_id = spaces.organisation(session=session).id
    overlap = patient_index.add_dataset(session=session, space_id=dataset.patient_space_id,
                                        dataset_id=dataset.id, ids=ids)
    dataset.patient_overlap = overlap.as_json()
    return overlap


def fold_generator(*, session: Session, dataset_id: int) -> patient_index.Overlap | None:
    """Key a generator dataset's rows into its seed's space (made, if it is the seed's first,
    with the smallest budget of the seed's datasets still in spaces of their own), in the
    caller's transaction; None when it is not (or no longer) in a space of its own.

    Raises:
        IndexCorrupted: the seed's index does not match its record (nothing changes).
    """
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or dataset.source_kind != "synthetic" \
            or _own_space(dataset) is None:
        return None
    locked = _locked_own(session, dataset_id)
    if locked is None:
        return None
    dataset, own = locked
    epsilon, delta = _seed_budget(session, dataset.seed)
    seed = generator_space.space_for(session=session, seed=dataset.seed, epsilon=epsilon,
                                     delta=delta)
    _leave(session, dataset, own)
    dataset.patient_space_id = seed.id
    overlap = generator_space.join(session=session, dataset=dataset)
    dataset.patient_overlap = overlap.as_json()
    return overlap


def _seed_budget(session: Session, seed: int) -> tuple[float, float]:
    """The smallest per-patient budget (epsilon, delta) of the seed's generator datasets in
    spaces of their own: their patients are one, and none had more than its own."""
    epsilon, delta = session.execute(
        select(func.min(PatientSpace.budget_epsilon), func.min(PatientSpace.budget_delta))
        .join(Dataset, Dataset.patient_space_id == PatientSpace.id)
        .where(PatientSpace.kind == SpaceKind.DATASET, Dataset.source_kind == "synthetic",
               Dataset.seed == seed)).one()
    return float(epsilon), float(delta)
