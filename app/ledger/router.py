"""Ledger API: thin routes over app.ledger.service."""

from typing import Any

from fastapi import APIRouter

from app.core.database import SessionDep
from app.datasets import service as dataset_service
from app.ledger import service
from app.ledger.schemas import ChainVerification

router = APIRouter(prefix="/v1/datasets", tags=["ledger"])


@router.get("/{dataset_id}/ledger/verify", response_model=ChainVerification)
def verify_ledger(dataset_id: int, session: SessionDep) -> dict[str, Any]:
    """Recompute the dataset's ledger hash chain and name the first record that breaks it."""
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    return service.verify_chain(session=session, dataset=dataset)
