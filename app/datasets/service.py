"""Dataset rules: registration, lookup, and access to the rows (regenerated from the seed)."""

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import InvalidRequest, NotFound
from app.datasets import synthetic
from app.datasets.models import Dataset
from app.datasets.schemas import DatasetCreate, PrivacyBudget
from app.ledger import service as ledger_service

TRAIN_FRACTION = 0.7


class DatasetNotFound(NotFound):
    kind, title = "dataset-not-found", "Dataset not found"


def create(*, session: Session, request: DatasetCreate) -> Dataset:
    """Register a dataset; a private one must carry a budget with delta < 1/n_rows.

    Raises:
        InvalidRequest: missing budget on a private dataset, or delta >= 1/n_rows.
    """
    n_rows = request.source.n_rows
    budget = request.privacy_budget
    if budget is None and not request.public:
        raise InvalidRequest(
            "a dataset that is not public needs a privacy_budget {epsilon, delta}",
            field="privacy_budget",
        )
    if budget is not None:
        _check_delta(budget.delta, n_rows, field="privacy_budget.delta")
    dataset = Dataset(
        name=request.name,
        source_kind=request.source.kind,
        n_rows=n_rows,
        n_train=synthetic.training_row_count(n_rows, request.source.seed, TRAIN_FRACTION),
        seed=request.source.seed,
        public=request.public,
        budget_epsilon=budget.epsilon if budget else None,
        budget_delta=budget.delta if budget else None,
        ledger_version=0,
    )
    session.add(dataset)
    session.flush()
    ledger_service.record_budget(session=session, dataset=dataset)
    return dataset


def _check_delta(delta: float, n_rows: int, *, field: str) -> None:
    if delta >= 1.0 / n_rows:
        raise InvalidRequest(
            f"delta must be below 1/n_rows = {1.0 / n_rows:.3g} (a larger delta allows "
            f"releasing a whole record)",
            field=field,
            allowed=f"(0, {1.0 / n_rows:.6g})",
        )


def change_budget(*, session: Session, dataset: Dataset, budget: PrivacyBudget) -> Dataset:
    """Set a new (epsilon, delta) budget; refused (409) below what is spent or reserved.

    Raises:
        InvalidRequest: delta >= 1/n_rows.
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


def load_split(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_holdout, y_holdout) in raw feature units, reproducible."""
    table = synthetic.generate(dataset.n_rows, dataset.seed)
    train, holdout = synthetic.split_indices(dataset.n_rows, dataset.seed, TRAIN_FRACTION)
    return table.x[train], table.y[train], table.x[holdout], table.y[holdout]

