"""CDS Hooks endpoints: discovery and the patient-view service. Features are never logged."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from app.cdshooks import service
from app.cdshooks.schemas import HookRequest
from app.core.database import SessionDep
from app.core.time import utcnow

router = APIRouter(prefix="/cds-services", tags=["cds-hooks"])


def known_service(service_id: str) -> str:
    """404 before the body is read: an unknown id is not a malformed request."""
    if service_id != service.SERVICE_ID:
        raise service.UnknownService(
            f"no CDS service {service_id!r}; this server has {service.SERVICE_ID!r}"
        )
    return service_id


@router.get("")
def discovery() -> dict[str, Any]:
    """CDS Hooks discovery: the services this server offers."""
    return service.discovery()


@router.post("/{service_id}")
def call_service(
    service_id: Annotated[str, Depends(known_service)], body: HookRequest, session: SessionDep
) -> dict[str, Any]:
    """Call the crisis-risk service for a patient-view hook; answers CDS Hooks cards."""
    return service.evaluate(
        session=session, service_id=service_id, hook=body.hook,
        patient_id=body.context.patientId, prefetch=body.prefetch, today=utcnow().date(),
    )
