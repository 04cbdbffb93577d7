"""Ledger API: a thin route over app.flows.ledger."""

from typing import Annotated

from fastapi import APIRouter

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import DatasetIdPath
from app.core.json_body import JsonRoute
from app.flows import ledger as ledger_flow
from app.ledger.schemas import ChainVerification

router = APIRouter(prefix="/v1/datasets", tags=["ledger"], route_class=JsonRoute)


@router.get("/{dataset_id}/ledger/verify")
def verify_ledger(
    dataset_id: DatasetIdPath, session: SessionDep,
    principal: Annotated[Principal, require_roles("privacy_officer")],
) -> ChainVerification:
    """Recompute the dataset's ledger hash chain and name the first record that breaks it."""
    return ledger_flow.verify(session=session, dataset_id=dataset_id, principal=principal)
