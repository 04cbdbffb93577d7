"""Dataset rules: registration, lookup, and access to the rows (regenerated from the seed)."""

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.errors import InvalidRequest, NotFound
from app.core.time import as_utc
from app.datasets import synthetic
from app.datasets.models import Dataset
from app.datasets.schemas import DatasetCreate

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
    if budget is not None and budget.delta >= 1.0 / n_rows:
        raise InvalidRequest(
            f"delta must be below 1/n_rows = {1.0 / n_rows:.3g} (a larger delta allows "
            f"releasing a whole record)",
            field="privacy_budget.delta",
            allowed=f"(0, {1.0 / n_rows:.6g})",
        )
    dataset = Dataset(
        name=request.name,
        source_kind=request.source.kind,
        n_rows=n_rows,
        n_train=int(round(TRAIN_FRACTION * n_rows)),
        seed=request.source.seed,
        public=request.public,
        budget_epsilon=budget.epsilon if budget else None,
        budget_delta=budget.delta if budget else None,
        ledger_version=0,
    )
    session.add(dataset)
    session.flush()
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


def to_out(dataset: Dataset) -> dict[str, object]:
    return {
        "id": dataset.id,
        "name": dataset.name,
        "source": {"kind": dataset.source_kind, "n_rows": dataset.n_rows, "seed": dataset.seed},
        "rows": dataset.n_rows,
        "training_rows": dataset.n_train,
        "holdout_rows": dataset.n_holdout,
        "public": dataset.public,
        "privacy_budget": {"epsilon": dataset.budget_epsilon, "delta": dataset.budget_delta},
        "created_at": as_utc(dataset.created_at),
    }
