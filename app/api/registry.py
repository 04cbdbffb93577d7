"""Model registry API: list and read models, activate one, roll back, set band thresholds."""

from typing import Annotated

from fastapi import APIRouter, Depends

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import ModelIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.flows import models as model_flow
from app.registry import service
from app.registry.models import TrainedModel
from app.registry.schemas import (
    ActivationChange,
    ActivationOut,
    ActivationPage,
    BandThresholds,
    ModelOut,
    ModelPage,
)

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=JsonRoute)
# Clinicians read models too: the dashboard lists them and shows each one's guarantee.
READERS = require_roles("data_scientist", "privacy_officer", "clinician")
# First in a route's parameters: checked before ``get_model_or_404``, so a refused caller
# learns nothing about which models exist.
DataScientist = Annotated[Principal, require_roles("data_scientist")]


def get_model_or_404(model_id: ModelIdPath, session: SessionDep) -> TrainedModel:
    return service.get(session=session, model_id=model_id)


ValidModel = Annotated[TrainedModel, Depends(get_model_or_404)]


@router.get("", dependencies=[READERS])
def list_models(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> ModelPage:
    """List trained models, newest first, with which one is active."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    active_id = service.active_id(session=session)
    return ModelPage(items=[service.describe(model=m, active_model_id=active_id) for m in rows],
                     total=total, limit=limit, offset=offset, active_model_id=active_id)


@router.get("/active", dependencies=[READERS], responses=problems(404, 409))
def get_active_model(session: SessionDep) -> ModelOut:
    """The model scoring uses when no model_id is named."""
    model = service.active(session=session)
    return service.describe(model=model, active_model_id=model.id)


@router.get("/activations", dependencies=[READERS])
def list_activations(
    session: SessionDep, limit: Limit = 50, offset: Offset = 0
) -> ActivationPage:
    """Activation history, newest first (auto, activate, rollback)."""
    rows, total = service.history_page(session=session, limit=limit, offset=offset)
    return ActivationPage(items=[ActivationOut.model_validate(r) for r in rows], total=total,
                          limit=limit, offset=offset)


@router.post("/rollback", responses=problems(409))
def rollback_model(principal: DataScientist, session: SessionDep) -> ActivationChange:
    """Reactivate the model that was active before the latest activation."""
    return model_flow.rollback(session=session, principal=principal)


@router.get("/{model_id}", dependencies=[READERS])
def get_model(model: ValidModel, session: SessionDep) -> ModelOut:
    """Read a model: metrics, privacy statement, band thresholds, whether it is active."""
    return service.describe(model=model, active_model_id=service.active_id(session=session))


@router.post("/{model_id}/activate", responses=problems(409))
def activate_model(
    principal: DataScientist, model: ValidModel, session: SessionDep
) -> ActivationChange:
    """Make this model the one scoring uses by default (only models of succeeded jobs)."""
    return model_flow.activate(session=session, model=model, principal=principal)


@router.put("/{model_id}/band-thresholds")
def set_band_thresholds(
    principal: DataScientist, body: BandThresholds, model: ValidModel, session: SessionDep
) -> ModelOut:
    """Change the model's risk-band thresholds (0 < low_medium < medium_high < 1)."""
    return model_flow.set_band_thresholds(session=session, model=model, thresholds=body,
                                          principal=principal)
