"""Datasets API: thin routes over app.datasets.service."""

from typing import Any

from fastapi import APIRouter, Request, status

from app.core.database import SessionDep
from app.core.pagination import Limit, Offset
from app.datasets import service
from app.datasets.schemas import DatasetCreate, DatasetOut
from app.ledger import report as ledger_report

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DatasetOut)
def create_dataset(body: DatasetCreate, session: SessionDep, request: Request) -> dict[str, Any]:
    """Register a dataset with its privacy budget."""
    dataset = service.create(session=session, request=body)
    return service.to_out(dataset)


@router.get("")
def list_datasets(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    """List datasets."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    return {"items": [service.to_out(d) for d in rows], "total": total, "limit": limit,
            "offset": offset}


@router.get("/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset_id: int, session: SessionDep) -> dict[str, Any]:
    """Read one dataset."""
    return service.to_out(service.get(session=session, dataset_id=dataset_id))


@router.get("/{dataset_id}/privacy-report")
def dataset_privacy_report(dataset_id: int, session: SessionDep) -> dict[str, Any]:
    """Budget, composed spend, remaining budget and the ledger entries of a dataset."""
    dataset = service.get(session=session, dataset_id=dataset_id)
    return ledger_report.dataset_report(session=session, dataset=dataset)
