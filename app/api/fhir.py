"""FHIR R4 face of the risk endpoint: a RiskAssessment resource."""

from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.scoring_route import ScoringRoute
from app.auth import audit
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.openapi import problems
from app.core.time import utcnow
from app.fhir import service
from app.fhir.schemas import RiskFhirRequest

router = APIRouter(tags=["fhir"], route_class=ScoringRoute)


@router.post(
    "/v1/risk/fhir",
    response_class=JSONResponse,
    responses={200: {"content": {service.FHIR_JSON: {}},
                     "description": "a FHIR R4 RiskAssessment"}, **problems(404, 409)},
)
def score_patient_fhir(
    body: RiskFhirRequest,
    principal: Annotated[Principal, require_roles("clinician")],
) -> JSONResponse:
    """Score one patient and answer with a FHIR R4 RiskAssessment."""
    scored, schema = service.assess(features=body.features, model_id=body.model_id,
                                    references=body.basis)
    audit.record_scoring(principal=principal, endpoint="risk/fhir",
                         patients=1, model_id=scored.model.id)
    resource = service.risk_assessment(
        scored=scored, schema=schema, subject=body.subject, references=body.basis,
        now=utcnow(),
    )
    return JSONResponse(resource, media_type=service.FHIR_JSON)
