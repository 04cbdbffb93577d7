"""The model registry's steps that cross domains: each change of which model scores, or of
its risk bands, with its audit event in one transaction.

The routes (``app.api.registry``) call one of these and return.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.registry.schemas import ActivationChange, ActivationOut, BandThresholds, ModelOut


def rollback(*, session: Session, principal: Principal) -> ActivationChange:
    """Reactivate the model that was active before the latest activation, and record it.

    Raises:
        a conflict (409) when there is nothing to roll back to (``registry_service.rollback``).
    """
    model, row = registry_service.rollback(session=session)
    audit.record(session=session, principal=principal, action=Action.MODEL_ROLLED_BACK,
                 target=f"model/{model.id}")
    return ActivationChange(model=registry_service.describe(model=model, active_model_id=model.id),
                            activation=ActivationOut.model_validate(row))


def activate(*, session: Session, model: TrainedModel, principal: Principal
             ) -> ActivationChange:
    """Make the model the one scoring uses by default, and record whether that changed it.

    Raises:
        a conflict (409) for a model of a job that did not succeed (``registry_service``).
    """
    row = registry_service.activate(session=session, model=model)
    audit.record(session=session, principal=principal, action=Action.MODEL_ACTIVATED,
                 target=f"model/{model.id}", detail={"changed": row is not None})
    return ActivationChange(
        model=registry_service.describe(model=model, active_model_id=model.id),
        activation=None if row is None else ActivationOut.model_validate(row),
    )


def set_band_thresholds(*, session: Session, model: TrainedModel, thresholds: BandThresholds,
                        principal: Principal) -> ModelOut:
    """Change the model's risk-band thresholds and record the new ones."""
    registry_service.set_band_thresholds(session=session, model=model,
                                         thresholds=thresholds.model_dump())
    audit.record(session=session, principal=principal, action=Action.BAND_THRESHOLDS_CHANGED,
                 target=f"model/{model.id}", detail=thresholds.model_dump())
    return registry_service.describe(model=model,
                                     active_model_id=registry_service.active_id(session=session))
