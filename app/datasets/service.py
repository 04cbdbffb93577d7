"""Dataset rules: registration, lookup, and access to the rows (regenerated from the seed)."""

from dataclasses import dataclass

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import Conflict, InvalidRequest, NotFound
from app.datasets import identity, synthetic
from app.datasets.models import Dataset
from app.datasets.schemas import DatasetCreate, PrivacyBudget
from app.ledger import service as ledger_service
from app.privacy.filter import filter_order

# delta must be at most 1 / (DELTA_ROWS_FACTOR * n_rows): at delta near 1/n, "publish one
# random record in full" satisfies (0, delta)-DP, so a delta that large protects nobody.
DELTA_ROWS_FACTOR = 10


class DatasetNotFound(NotFound):
    kind, title = "dataset-not-found", "Dataset not found"


class DatasetAlreadyRegistered(Conflict):
    kind, title = "dataset-already-registered", "This source is already registered"


class DatasetWithoutIdentity(Conflict):
    kind, title = "dataset-without-identity", "Dataset has no record secret"


Groups = dict[str, tuple[np.ndarray, list[str]]]


@dataclass(frozen=True)
class PartRows:
    """One part's rows: raw features, outcomes, and subgroup codes with their public labels."""

    x: np.ndarray
    y: np.ndarray
    groups: Groups


@dataclass(frozen=True)
class Split:
    train: PartRows
    calibration: PartRows
    evaluation: PartRows


def create(*, session: Session, request: DatasetCreate) -> Dataset:
    """Register a dataset; a private one must carry a budget with delta <= 1/(10 n_rows).

    Raises:
        DatasetAlreadyRegistered: the same source is registered already (409).
        InvalidRequest: missing budget on a private dataset, or delta above 1/(10 n_rows).
    """
    n_rows, seed = request.source.n_rows, request.source.seed
    budget = request.privacy_budget
    if budget is None and not request.public:
        raise InvalidRequest(
            "a dataset that is not public needs a privacy_budget {epsilon, delta}",
            field="privacy_budget",
        )
    if budget is not None:
        _check_delta(budget.delta, n_rows, field="privacy_budget.delta")
    fingerprint = identity.synthetic_fingerprint(n_rows, seed)
    _check_new_source(session, fingerprint)
    secret = identity.new_secret()
    counts = identity.part_counts(identity.parts_of(range(n_rows), secret))
    dataset = Dataset(
        name=request.name,
        source_kind=request.source.kind,
        n_rows=n_rows,
        n_train=counts[identity.Part.TRAIN],
        n_calibration=counts[identity.Part.CALIBRATION],
        seed=seed,
        record_secret=secret,
        source_fingerprint=fingerprint,
        public=request.public,
        budget_epsilon=budget.epsilon if budget else None,
        budget_delta=budget.delta if budget else None,
        filter_order=filter_order(budget.epsilon, budget.delta) if budget else None,
        ledger_version=0,
    )
    session.add(dataset)
    session.flush()
    ledger_service.record_budget(session=session, dataset=dataset)
    return dataset


def _check_new_source(session: Session, fingerprint: str) -> None:
    """Refuse a source that is already registered (private or public): one budget per data.

    The unique fingerprint column also refuses a concurrent twin at commit.
    """
    existing = session.scalar(select(Dataset.id).where(Dataset.source_fingerprint == fingerprint))
    if existing is not None:
        raise DatasetAlreadyRegistered(
            f"this source is already registered as dataset {existing}; a second registration "
            f"would give the same patients a second privacy budget",
            field="source", existing_dataset_id=existing,
            existing_dataset=f"/v1/datasets/{existing}",
        )


def max_delta(n_rows: int) -> float:
    return 1.0 / (DELTA_ROWS_FACTOR * n_rows)


def _check_delta(delta: float, n_rows: int, *, field: str) -> None:
    if delta > max_delta(n_rows):
        raise InvalidRequest(
            f"delta must be at most 1/(10 n_rows) = {max_delta(n_rows):.3g}: at delta near "
            f"1/n_rows, publishing one random record in full meets the guarantee, so such a "
            f"delta protects nobody",
            field=field,
            allowed=f"(0, {max_delta(n_rows):.6g}]",
        )


def change_budget(*, session: Session, dataset: Dataset, budget: PrivacyBudget) -> Dataset:
    """Set a new (epsilon, delta) budget; refused (409) below what is spent or reserved.

    Raises:
        InvalidRequest: delta above 1/(10 n_rows).
        BudgetBelowSpend: the composed spend at the new delta exceeds the new epsilon.
    """
    _check_delta(budget.delta, dataset.n_rows, field="delta")
    ledger_service.change_budget(
        session=session, dataset=dataset, epsilon=budget.epsilon, delta=budget.delta
    )
    return dataset


def get(*, session: Session, dataset_id: int) -> Dataset:
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        raise DatasetNotFound(f"dataset {dataset_id} does not exist", field="dataset_id")
    return dataset


def list_page(*, session: Session, limit: int, offset: int) -> tuple[list[Dataset], int]:
    total = session.scalar(select(func.count()).select_from(Dataset)) or 0
    rows = session.scalars(select(Dataset).order_by(Dataset.id).limit(limit).offset(offset))
    return list(rows), total


def load_parts(dataset: Dataset) -> Split:
    """The dataset's rows in raw feature units, by part (each record's keyed coin).

    Raises:
        DatasetWithoutIdentity: the dataset has no record secret (its data were erased).
    """
    if dataset.record_secret is None:
        raise DatasetWithoutIdentity(
            f"dataset {dataset.id} has no record secret: its rows cannot be split",
            field="dataset_id",
        )
    table = synthetic.generate(dataset.n_rows, dataset.seed)
    parts = identity.parts_of(range(dataset.n_rows), dataset.record_secret)

    def rows(part: identity.Part) -> PartRows:
        member = parts == part
        return PartRows(table.x[member], table.y[member],
                        synthetic.subgroups(table.x[member], table.sex[member]))

    return Split(rows(identity.Part.TRAIN), rows(identity.Part.CALIBRATION),
                 rows(identity.Part.EVALUATION))
