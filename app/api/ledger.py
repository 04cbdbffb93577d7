"""Ledger API: thin routes over app.ledger.service."""

from typing import Annotated

from fastapi import APIRouter

from app.auth import audit
from app.auth.audit import Action
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import DatasetIdPath
from app.core.json_body import JsonRoute
from app.datasets import service as dataset_service
from app.ledger import service
from app.ledger.schemas import ChainVerification

router = APIRouter(prefix="/v1/datasets", tags=["ledger"], route_class=JsonRoute)


@router.get("/{dataset_id}/ledger/verify")
def verify_ledger(
    dataset_id: DatasetIdPath, session: SessionDep,
    principal: Annotated[Principal, require_roles("privacy_officer")],
) -> ChainVerification:
    """Recompute the dataset's ledger hash chain and name the first record that breaks it."""
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    result = ChainVerification.model_validate(
        service.verify_chain(session=session, dataset=dataset)
    )
    audit.record(session=session, principal=principal, action=Action.LEDGER_VERIFIED,
                 target=f"dataset/{dataset.id}",
                 detail={"valid": result.valid, "records": result.records,
                         "head_hash": result.head_hash})
    return result
