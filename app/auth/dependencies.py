"""``Authorization: Bearer <key>`` on every API route, and the roles each route admits.

``app.main`` puts ``authenticate`` on every router but the probes and the dashboard's static
files, so a route nobody gave roles to still needs a valid key. Each route then names its roles
with ``require_roles``; ``admin`` may call everything. FastAPI caches ``authenticate`` per
request, so the key is looked up once however many dependencies ask for the caller.
"""

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from app.auth import key_cache, service
from app.auth.principal import Principal
from app.core.database import get_database
from app.core.errors import Forbidden, Unauthorized
from app.core.logs import request_id

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or an unknown or revoked one (problem+json)"},
    403: {"description": "The key's role may not call this route (problem+json)"},
}
"""Documented on every route that needs a key (``app.main``)."""

bearer = HTTPBearer(
    auto_error=False, scheme_name="ApiKey",
    description="An API key from `dpcrisis keys create` or `POST /v1/keys`.",
)


def _lookup(key_digest: str) -> key_cache.VerifiedKey | None:
    # A short session of its own (not the route's): the lookup neither holds a connection for
    # the whole request nor opens the route's transaction early.
    with get_database().session_scope() as session:
        key = service.authenticate_digest(session=session, key_digest=key_digest)
        # The role as its plain word (the column reads back a Role member): messages quote it.
        return None if key is None else key_cache.VerifiedKey(key.id, key.name, str(key.role))


async def authenticate(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller behind the Bearer key; 401 without one, or with an unknown or revoked one.

    A key verified in the last second is taken from ``key_cache`` without a database trip.
    """
    if credentials is None:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    key_digest = service.digest(credentials.credentials)
    memory_key = (get_database().token, key_digest)
    key = key_cache.remembered.get(memory_key, key_cache.TTL_SECONDS)
    if key is None:
        ticket = key_cache.remembered.begin()
        key = await run_in_threadpool(_lookup, key_digest)
        if key is None:
            raise Unauthorized("the API key is unknown or revoked", error="invalid_token")
        key_cache.remembered.put(memory_key, key, ticket)
    return Principal(name=key.name, role=key.role, key_id=key.key_id,
                     request_id=request_id.get())


CurrentPrincipal = Annotated[Principal, Depends(authenticate)]


def require_roles(*roles: str) -> Any:
    """A dependency admitting ``admin`` and ``roles`` (403 for any other role).

    Use it in a route's ``dependencies=[...]``, or as ``Annotated[Principal, require_roles(...)]``
    when the route needs the caller (for the audit log).
    """
    allowed = ("admin", *roles)

    async def check(request: Request, principal: CurrentPrincipal) -> Principal:
        if principal.role not in allowed:
            route = getattr(request.scope.get("route"), "path", request.url.path)
            raise Forbidden(
                f"role {principal.role!r} may not call {request.method} {route}; "
                f"allowed: {', '.join(allowed)}"
            )
        return principal

    return Depends(check)
