"""CDS Hooks endpoints: discovery, the patient-view service and its feedback. Features are
never logged.

Callers authenticate as CDS Hooks 2.0 says, with a JWT signed by an allow-listed EHR
(``app.cdshooks.client_auth``), or with an API key of a clinician (non-EHR callers, the
dashboard's tests, scripts). The router is mounted without the API-key dependency the other
routers get (``app.main``): ``cds_caller`` is its authentication.
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from app.auth.dependencies import AUTH_RESPONSES, authenticate
from app.auth.principal import Principal
from app.cdshooks import client_auth, feedback, service
from app.cdshooks.schemas import CdsResponse, Discovery, FeedbackRequest, HookRequest
from app.core.database import SessionDep
from app.core.errors import Forbidden, Unauthorized
from app.core.json_body import JsonRoute
from app.core.logs import request_id
from app.core.openapi import problems
from app.core.settings import settings
from app.core.time import utcnow
from app.flows import scoring as scoring_flow
from app.privacy.annotations import Released
from app.privacy.releases import Release

ROLES = ("admin", "clinician")
FEEDBACK = "/feedback"

cds_bearer = HTTPBearer(
    auto_error=False, scheme_name="CdsClient",
    description="A JWT signed by an EHR listed in DPCRISIS_CDS_CLIENTS (RS384 or ES384; aud: "
    "the endpoint's URL), or an API key of a clinician.",
)


def audiences(request: Request) -> list[str]:
    """The URLs a JWT's ``aud`` may name for this request: the endpoint called (for feedback,
    the service's URL too), under ``DPCRISIS_CDS_BASE_URL``.

    Never under the URL the request arrived at: its Host (and any forwarded header) is the
    caller's choice, so a token minted for another CDS service would pass.

    Raises:
        Unauthorized: no base URL is configured, so no JWT can be accepted.
    """
    if settings.dpcrisis_cds_base_url is None:
        raise Unauthorized("this service accepts no CDS Hooks JWTs: DPCRISIS_CDS_BASE_URL is "
                           "not set (use an API key)", error="invalid_token")
    base = settings.dpcrisis_cds_base_url.rstrip("/")
    path = request.url.path.rstrip("/")
    urls = [base + path]
    if path.endswith(FEEDBACK):
        urls.append(base + path.removesuffix(FEEDBACK))
    return urls


async def cds_caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(cds_bearer)],
) -> Principal:
    """An EHR by its signed JWT, or a clinician (or admin) by API key; 401 / 403 otherwise."""
    if credentials is not None and client_auth.looks_like_jwt(credentials.credentials):
        caller = await client_auth.verify(credentials.credentials,
                                          audiences=audiences(request))
        return Principal(name=f"cds:{caller.iss}"[:100], role="clinician",
                         request_id=request_id.get())
    principal = await authenticate(credentials)
    if principal.role not in ROLES:
        raise Forbidden(f"role {principal.role!r} may not call {request.method} "
                        f"{request.url.path}; allowed: {', '.join(ROLES)}, or an EHR's JWT")
    return principal


Caller = Annotated[Principal, Depends(cds_caller)]
router = APIRouter(prefix="/cds-services", tags=["cds-hooks"], route_class=JsonRoute,
                   responses=AUTH_RESPONSES)


def known_service(service_id: str) -> str:
    """404 before the body is read: an unknown id is not a malformed request."""
    if service_id not in service.SERVICE_IDS:
        raise service.UnknownService(
            f"no CDS service {service_id!r}; this server has {service.SERVICE_ID!r}"
        )
    return service_id


@router.get("", dependencies=[Depends(cds_caller)])
def discover_cds_services() -> Discovery:
    """CDS Hooks discovery: the services this server offers."""
    return service.discovery()


@router.post("/{service_id}", responses=problems(409, 412))
def call_cds_service(
    principal: Caller, service_id: Annotated[str, Depends(known_service)], body: HookRequest,
) -> CdsResponse:
    """Call the risk service for a patient-view hook; answers CDS Hooks cards."""
    return scoring_flow.call_cds_service(service_id=service_id, request=body,
                                         principal=principal, today=utcnow().date())


RECEIVED = Released(Release.PUBLIC_INPUT, note="how many feedback items the caller's own request "
                    "held")


class FeedbackReceived(BaseModel):
    received: Annotated[int, RECEIVED]


@router.post("/{service_id}/feedback")
def send_cds_feedback(
    principal: Caller, service_id: Annotated[str, Depends(known_service)],
    body: FeedbackRequest, session: SessionDep,
) -> FeedbackReceived:
    """CDS Hooks feedback: what the clinician did with each card (accepted or overridden)."""
    count = feedback.record(session=session, principal=principal, service_id=service_id,
                            feedback=body)
    return FeedbackReceived(received=count)
