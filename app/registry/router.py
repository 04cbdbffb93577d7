"""Model registry API."""

from typing import Any

from fastapi import APIRouter

from app.core.database import SessionDep
from app.core.pagination import Limit, Offset
from app.registry import service

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("")
def list_models(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    """List trained models, newest first."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    return {"items": [service.to_out(m) for m in rows], "total": total, "limit": limit,
            "offset": offset}


@router.get("/{model_id}")
def get_model(model_id: int, session: SessionDep) -> dict[str, Any]:
    """Read a model: metrics, privacy statement, band thresholds."""
    return service.to_out(service.get(session=session, model_id=model_id))
