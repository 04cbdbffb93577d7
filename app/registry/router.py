"""Model registry API: list and read models, activate one, roll back, set band thresholds."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from app.core.database import SessionDep
from app.core.pagination import Limit, Offset
from app.registry import service
from app.registry.models import TrainedModel
from app.registry.schemas import BandThresholds

router = APIRouter(prefix="/v1/models", tags=["models"])


def get_model_or_404(model_id: int, session: SessionDep) -> TrainedModel:
    return service.get(session=session, model_id=model_id)


ValidModel = Annotated[TrainedModel, Depends(get_model_or_404)]


@router.get("")
def list_models(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    """List trained models, newest first, with which one is active."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    active_id = service.active_id(session=session)
    return {"items": [service.to_out(m, active_model_id=active_id) for m in rows],
            "total": total, "limit": limit, "offset": offset, "active_model_id": active_id}


@router.get("/active")
def get_active_model(session: SessionDep) -> dict[str, Any]:
    """The model scoring uses when no model_id is named."""
    model = service.active(session=session)
    return service.to_out(model, active_model_id=model.id)


@router.get("/activations")
def list_activations(
    session: SessionDep, limit: Limit = 50, offset: Offset = 0
) -> dict[str, Any]:
    """Activation history, newest first (auto, activate, rollback)."""
    rows, total = service.history_page(session=session, limit=limit, offset=offset)
    return {"items": [service.activation_out(r) for r in rows], "total": total,
            "limit": limit, "offset": offset}


@router.post("/rollback")
def rollback(session: SessionDep) -> dict[str, Any]:
    """Reactivate the model that was active before the latest activation."""
    model, row = service.rollback(session=session)
    return {"model": service.to_out(model, active_model_id=model.id),
            "activation": service.activation_out(row)}


@router.get("/{model_id}")
def get_model(model: ValidModel, session: SessionDep) -> dict[str, Any]:
    """Read a model: metrics, privacy statement, band thresholds, whether it is active."""
    return service.to_out(model, active_model_id=service.active_id(session=session))


@router.post("/{model_id}/activate")
def activate_model(model: ValidModel, session: SessionDep) -> dict[str, Any]:
    """Make this model the one scoring uses by default (only models of succeeded jobs)."""
    row = service.activate(session=session, model=model)
    return {"model": service.to_out(model, active_model_id=model.id),
            "activation": None if row is None else service.activation_out(row)}


@router.put("/{model_id}/band-thresholds")
def put_band_thresholds(
    body: BandThresholds, model: ValidModel, session: SessionDep
) -> dict[str, Any]:
    """Change the model's risk-band thresholds (0 < low_medium < medium_high < 1)."""
    service.set_band_thresholds(session=session, model=model, thresholds=body.model_dump())
    return service.to_out(model, active_model_id=service.active_id(session=session))
