"""Keys API (admin) and the audit log (admin and privacy officer, read-only)."""

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.auth import audit, service
from app.auth.audit import Action
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.auth.schemas import AuditEventOut, AuditPage, KeyCreate, KeyCreated, KeyOut, KeyPage
from app.core.database import SessionDep
from app.core.ids import KeyIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.core.schemas import NO_CONTROL_CHARACTERS

keys_router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=JsonRoute)
audit_router = APIRouter(prefix="/v1/audit-log", tags=["audit"], route_class=JsonRoute)

Admin = Annotated[Principal, require_roles()]


@keys_router.post("", status_code=status.HTTP_201_CREATED, responses=problems(409))
def create_key(
    body: KeyCreate, session: SessionDep, principal: Admin, response: Response
) -> KeyCreated:
    """Create an API key with a role; the answer holds the key, shown this once only."""
    key, secret = service.create(session=session, name=body.name, role=body.role,
                                 principal=principal)
    response.headers["Location"] = f"/v1/keys/{key.id}"
    response.headers["Cache-Control"] = "no-store"  # the secret must not sit in a cache
    return KeyCreated.from_row(key, key=secret)


@keys_router.get("", dependencies=[require_roles()])
def list_keys(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> KeyPage:
    """List keys (names, roles, public ids; never the secrets or their hashes)."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    return KeyPage(items=[KeyOut.model_validate(k) for k in rows], total=total, limit=limit,
                   offset=offset)


@keys_router.delete("/{key_id}", responses=problems(409))
def revoke_key(key_id: KeyIdPath, session: SessionDep, principal: Admin) -> KeyOut:
    """Revoke a key from the next request on (idempotent); never the last admin key (409)."""
    key = service.revoke(session=session, key=service.get(session=session, key_id=key_id),
                         principal=principal)
    return KeyOut.model_validate(key)


@audit_router.get("")
def list_audit_events(
    session: SessionDep,
    principal: Annotated[Principal, require_roles("privacy_officer", "data_steward")],
    limit: Limit = 50, offset: Offset = 0,
    action: Action | None = None,
    actor: Annotated[str | None, Query(max_length=100, pattern=NO_CONTROL_CHARACTERS,
                                       description="a key's name")] = None,
) -> AuditPage:
    """Who did what and when, newest first; filter by ``action`` and ``actor`` (an upload's
    intake facts only for admins and data stewards)."""
    rows, total = audit.list_page(session=session, limit=limit, offset=offset, action=action,
                                  actor=actor)
    items = [AuditEventOut.model_validate(e).model_copy(
        update={"detail": audit.detail_for(e, principal.role)}) for e in rows]
    return AuditPage(items=items, total=total, limit=limit, offset=offset)
