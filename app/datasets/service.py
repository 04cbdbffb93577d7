"""Dataset rules: registration, lookup, and access to the rows (regenerated from the seed)."""

import hashlib

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.core.database import affected_rows
from app.core.errors import Conflict, InvalidRequest, NotFound
from app.datasets import synthetic, union
from app.datasets.intake import table_store
from app.datasets.models import AWAITING_DATA, READY, WITHDRAWN, Dataset
from app.datasets.patients import generator_space, identity, patient_index
from app.datasets.rules import check_delta, check_new_source, upload_fingerprint
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.checks import check_schema
from app.datasets.schema.dataset_schema import schema_hash
from app.datasets.schemas import DatasetCreate, PrivacyBudget, SyntheticSource, UnionSource
from app.ledger import block_spend, spaces
from app.ledger import service as ledger_service
from app.privacy.filter import filter_order

BUILT_IN_SCHEMA_JSON = BUILT_IN_SCHEMA.model_dump(mode="json", by_alias=True)


class DatasetNotFound(NotFound):
    kind, title = "dataset-not-found", "Dataset not found"


def create(*, session: Session, request: DatasetCreate) -> Dataset:
    """Register a dataset; a private one must carry a budget with delta <= 1/(10 n_rows).

    A synthetic source is ready at once (its rows come from the generator); an upload waits
    for its rows (``app.flows.upload``), where its size, delta and identity are checked.

    Raises:
        DatasetAlreadyRegistered: the same source is registered already (409).
        InvalidRequest: missing budget on a private dataset, delta above 1/(10 n_rows), a
            schema on a synthetic source, or an upload without a valid schema.
    """
    budget = request.privacy_budget
    if budget is None and not request.public:
        raise InvalidRequest(
            "a dataset that is not public needs a privacy_budget {epsilon, delta}",
            field="privacy_budget",
        )
    if isinstance(request.source, UnionSource):
        if request.public:
            raise InvalidRequest("a union of private cohorts is private: it needs a "
                                 "privacy_budget", field="public", allowed="false")
        dataset = union.build(session=session, request=request)
    elif isinstance(request.source, SyntheticSource):
        dataset = _synthetic(session, request)
    else:
        dataset = _upload(request)
    dataset.name, dataset.public = request.name, request.public
    if request.follow_up is not None:  # the caller (app.flows.datasets) checked the model
        dataset.follow_up_model_id = request.follow_up.model_id
        dataset.follow_up_period_start = request.follow_up.period_start
        dataset.follow_up_period_end = request.follow_up.period_end
        dataset.labelled = request.follow_up.labelled
    if budget is not None:
        dataset.budget_epsilon, dataset.budget_delta = budget.epsilon, budget.delta
        dataset.filter_order = filter_order(budget.epsilon, budget.delta)
        dataset.patient_space_id = _space_for(session, dataset).id
    session.add(dataset)
    session.flush()
    if dataset.source_kind == "synthetic" and dataset.patient_space_id is not None:
        dataset.patient_overlap = generator_space.join(session=session,
                                                       dataset=dataset).as_json()
    if dataset.union_of is not None:  # every patient of its members is one of its own
        assert dataset.patient_space_id is not None
        dataset.patient_overlap = patient_index.add_union(
            session=session, space_id=dataset.patient_space_id, dataset_id=dataset.id,
            members=dataset.union_of).as_json()
    ledger_service.record_budget(session=session, dataset=dataset)
    return dataset


def _space_for(session: Session, dataset: Dataset) -> spaces.PatientSpace:
    """The patient space a private dataset's releases charge: the organisation's for an upload
    (its ids are keyed into it when its rows arrive); for the generator, its seed's, made with
    this dataset's budget if it is the seed's first (its patients are the seed's rows,
    whatever the shift: ``generator_space``).

    Raises:
        InvalidRequest: the seed's per-patient delta is above 1/(10 n_rows) (422).
    """
    if dataset.source_kind in ("upload", union.UNION):
        return spaces.organisation(session=session)
    assert dataset.budget_epsilon is not None and dataset.budget_delta is not None
    space = generator_space.space_for(session=session, seed=dataset.seed,
                                      epsilon=dataset.budget_epsilon, delta=dataset.budget_delta)
    generator_space.check_size(space=space, n_rows=dataset.n_rows)
    return space


def _synthetic(session: Session, request: DatasetCreate) -> Dataset:
    assert isinstance(request.source, SyntheticSource)
    n_rows, seed, shift = request.source.n_rows, request.source.seed, request.source.shift
    if request.declared_schema is not None:
        raise InvalidRequest("the synthetic generator has its own schema (the built-in schema); "
                             "send a schema only with an upload", field="schema")
    if request.privacy_budget is not None:
        check_delta(request.privacy_budget.delta, n_rows, field="privacy_budget.delta")
    fingerprint = identity.synthetic_fingerprint(n_rows, seed)
    if shift is not None:  # other rows than the unshifted generator's: another source
        fingerprint = hashlib.sha256(f"{fingerprint}:shift:{shift}".encode()).hexdigest()
    generated = generated_rows_fingerprint(n_rows, seed, shift)
    check_new_source(session, fingerprint, generated)
    secret = identity.new_secret()
    counts = identity.part_counts(identity.parts_of(
        range(n_rows), secret, scheme=identity.CURRENT_SCHEME))
    return Dataset(
        source_kind="synthetic", synthetic_shift=shift, n_rows=n_rows,
        n_train=counts[identity.Part.TRAIN],
        n_calibration=counts[identity.Part.CALIBRATION], seed=seed, record_secret=secret,
        coin_scheme=identity.CURRENT_SCHEME,
        source_fingerprint=fingerprint, content_fingerprint=generated,
        schema_json=BUILT_IN_SCHEMA_JSON,
        schema_hash=schema_hash(BUILT_IN_SCHEMA), state=READY, ledger_version=0,
    )


def generated_rows_fingerprint(n_rows: int, seed: int, shift: str | None = None) -> str:
    """The identity an upload of the generator's rows (under its schema, any ids, any order)
    would have: ids are not part of a table's content fingerprint."""
    table = synthetic.generate(n_rows, seed, shift)
    content = table_store.fingerprint(
        BUILT_IN_SCHEMA, table.x.astype(np.float64), table.y.astype(np.float64),
        {"sex": table.sex.astype(np.int64)})
    return upload_fingerprint(content)


def _upload(request: DatasetCreate) -> Dataset:
    declared = request.declared_schema
    if declared is None:
        raise InvalidRequest("an upload needs its declared schema (features with public "
                             "bounds, outcome, subgroups, id column)", field="schema")
    check_schema(declared, upload=True)
    if declared.id_column is None and not request.public:
        raise InvalidRequest(
            "a private upload declares its id_column (pseudonymous patient ids): the budget "
            "belongs to the patient, and only a stable id finds a patient again in the "
            "organisation's other tables", field="schema.id_column",
            allowed="the name of the table's patient-id column")
    return Dataset(
        source_kind="upload", n_rows=0, n_train=0, n_calibration=0, seed=0,
        schema_json=declared.model_dump(mode="json", by_alias=True),
        schema_hash=schema_hash(declared), state=AWAITING_DATA, ledger_version=0,
        coin_scheme=identity.CURRENT_SCHEME,
    )


def change_budget(*, session: Session, dataset: Dataset, budget: PrivacyBudget) -> Dataset:
    """Set a new (epsilon, delta) budget; refused (409) below what is spent or reserved.

    Raises:
        InvalidRequest: delta above 1/(10 n_rows).
        BudgetBelowSpend: the composed spend at the new delta exceeds the new epsilon.
    """
    check_delta(budget.delta, dataset.n_rows, field="delta")
    ledger_service.change_budget(
        session=session, dataset=dataset, epsilon=budget.epsilon, delta=budget.delta
    )
    _follow_alone_in_seed(session, dataset, budget)
    return dataset


def _follow_alone_in_seed(session: Session, dataset: Dataset, budget: PrivacyBudget) -> None:
    """A seed's space that holds this dataset alone: its budget is its patients' only table's,
    and moves with it (chained in the space's chain), as a space of one dataset's own does in
    the ledger. Once another dataset of the seed shares the patients, one table's budget no
    longer moves theirs."""
    space = (None if dataset.patient_space_id is None
             else session.get(spaces.PatientSpace, dataset.patient_space_id))
    if space is None or space.kind != spaces.SpaceKind.GENERATOR:
        return
    members = session.scalar(select(func.count()).select_from(Dataset)
                             .where(Dataset.patient_space_id == space.id)) or 0
    if members == 1:
        block_spend.change_budget(session=session, space_id=space.id, epsilon=budget.epsilon,
                                  delta=budget.delta)


def get(*, session: Session, dataset_id: int) -> Dataset:
    """The dataset; a withdrawn one is gone (404) like one that never existed."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or dataset.state == WITHDRAWN:
        raise DatasetNotFound(f"dataset {dataset_id} does not exist", field="dataset_id")
    return dataset


def list_page(*, session: Session, limit: int, offset: int) -> tuple[list[Dataset], int]:
    listed = Dataset.state != WITHDRAWN
    total = session.scalar(select(func.count()).select_from(Dataset).where(listed)) or 0
    rows = session.scalars(select(Dataset).where(listed).order_by(Dataset.id)
                           .limit(limit).offset(offset))
    return list(rows), total


class DatasetHasData(Conflict):
    kind, title = "dataset-has-data", "The dataset has (or had) rows"


def withdraw(*, session: Session, dataset_id: int) -> None:
    """Delete a registration that never received rows (a failed first upload leaves one).

    Only its state changes (``withdrawn``): the ledger's budget record and the audit events
    are append-only and stay. A conditional UPDATE, so an upload claiming the dataset at the
    same moment either wins (this is refused) or finds it gone.

    Raises:
        DatasetNotFound: no such dataset (404).
        DatasetHasData: it has, had, or is receiving rows: erase its data instead (409).
    """
    withdrawn = affected_rows(session.execute(
        update(Dataset).where(Dataset.id == dataset_id, Dataset.state == AWAITING_DATA)
        .values(state=WITHDRAWN).execution_options(synchronize_session=False)
    ))
    if withdrawn != 1:
        dataset = get(session=session, dataset_id=dataset_id)
        session.refresh(dataset)
        raise DatasetHasData(
            f"dataset {dataset_id} is {dataset.state}: only a registration that never received "
            "rows can be deleted; erase its rows with DELETE /v1/datasets/{id}/data (its ledger "
            "and reports stay)", field="dataset_id", state=dataset.state,
        )
