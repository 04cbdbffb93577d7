"""CDS Hooks endpoints: discovery and the patient-view service. Features are never logged."""

from typing import Annotated

from fastapi import APIRouter, Depends

from app.auth import audit
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.cdshooks import service
from app.cdshooks.schemas import CdsResponse, Discovery, HookRequest
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.core.time import utcnow

router = APIRouter(prefix="/cds-services", tags=["cds-hooks"], route_class=JsonRoute)
# EHRs call as clinicians (their key is configured with the service, even for discovery).
Clinician = Annotated[Principal, require_roles("clinician")]


def known_service(service_id: str) -> str:
    """404 before the body is read: an unknown id is not a malformed request."""
    if service_id != service.SERVICE_ID:
        raise service.UnknownService(
            f"no CDS service {service_id!r}; this server has {service.SERVICE_ID!r}"
        )
    return service_id


@router.get("", dependencies=[require_roles("clinician")])
def discover_cds_services() -> Discovery:
    """CDS Hooks discovery: the services this server offers."""
    return service.discovery()


@router.post("/{service_id}", responses=problems(409))
def call_cds_service(
    principal: Clinician, service_id: Annotated[str, Depends(known_service)],
    body: HookRequest,
) -> CdsResponse:
    """Call the crisis-risk service for a patient-view hook; answers CDS Hooks cards."""
    answer, model_id = service.evaluate(
        service_id=service_id, hook=body.hook,
        patient_id=body.context.patientId, prefetch=body.prefetch, today=utcnow().date(),
    )
    if model_id is not None:  # an insufficient-data card scored nobody
        audit.record_scoring(principal=principal, endpoint="cds-services",
                             patients=1, model_id=model_id)
    return answer
