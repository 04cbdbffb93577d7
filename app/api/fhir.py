"""FHIR R4 faces: the risk endpoint as a RiskAssessment, and the service's CodeSystems (its
bands, card topics, and the local codes of each model's schema's uncoded features).

Their errors are ``OperationOutcome`` resources (``app.fhir.outcome``), made from the same
problem document every other route answers with.
"""

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app.api.scoring_route import ScoringRoute
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.openapi import problems
from app.core.time import utcnow
from app.fhir import outcome, service, terminology
from app.fhir.schemas import RiskFhirRequest
from app.flows import scoring as scoring_flow

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _handler_for(request: Request, exc: Exception) -> Any:
    """The app's exception handler for ``exc`` (by its class, nearest first), if any."""
    handlers = request.app.exception_handlers
    return next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)


def _outcomes(handler: Handler) -> Handler:
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception as exc:
            handle = _handler_for(request, exc)
            if handle is None:
                raise
            answer = await handle(request, exc)
            return outcome.as_outcome(answer, request.headers.get("accept"))

    return route


class FhirScoringRoute(ScoringRoute):
    def get_route_handler(self) -> Handler:
        return _outcomes(super().get_route_handler())


class FhirRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        return _outcomes(super().get_route_handler())


def _fhir(description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"content": {service.FHIR_JSON: {}}, "description": description}}


router = APIRouter(tags=["fhir"], route_class=FhirScoringRoute)
terminology_router = APIRouter(prefix="/fhir", tags=["fhir"], route_class=FhirRoute)


@router.post(
    "/v1/risk/fhir", response_class=JSONResponse,
    responses={**_fhir("a FHIR R4 RiskAssessment"), **problems(404, 409)},
)
def score_patient_fhir(
    body: RiskFhirRequest,
    principal: Annotated[Principal, require_roles("clinician")],
) -> JSONResponse:
    """Score one patient and answer with a FHIR R4 RiskAssessment."""
    resource = scoring_flow.assess_fhir(request=body, principal=principal, now=utcnow())
    return JSONResponse(resource, media_type=service.FHIR_JSON)


@terminology_router.get("/CodeSystem", response_class=JSONResponse,
                        responses=_fhir("a searchset Bundle of CodeSystems"))
def search_code_systems(
    session: SessionDep,
    url: Annotated[str | None, Query(max_length=300, description="a canonical URL")] = None,
) -> JSONResponse:
    """Find the service's CodeSystems (by canonical URL); public, no key."""
    return JSONResponse(terminology.search(session=session, url=url),
                        media_type=service.FHIR_JSON)


@terminology_router.get("/CodeSystem/{code_system_id}", response_class=JSONResponse,
                        responses=_fhir("a FHIR R4 CodeSystem"))
def read_code_system(code_system_id: str, session: SessionDep) -> JSONResponse:
    """One of the service's CodeSystems (risk-band, cds-topic, features); public, no key."""
    return JSONResponse(terminology.read(session=session, code_system_id=code_system_id),
                        media_type=service.FHIR_JSON)
