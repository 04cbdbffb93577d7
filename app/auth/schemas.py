"""Request and response bodies of the keys and audit-log APIs."""

from typing import Any

from pydantic import Field

from app.auth.models import Role as Role  # defined there, once
from app.auth.service import NAME_PATTERN
from app.core.schemas import Page, RequestModel, ResponseModel, UtcDatetime


class KeyCreate(RequestModel):
    name: str = Field(pattern=NAME_PATTERN,
                      description="unique, never reused: who or what holds the key")
    role: Role


class KeyOut(ResponseModel):
    """A key as the API and the CLI show it: never the hash, never the secret."""

    id: int
    name: str
    role: Role
    prefix: str = Field(
        validation_alias="display_id",
        description="the key's public part, dpk_<public id> (the key starts with it), or "
        "key-<id> for a key made before keys had one; never any of the secret",
    )
    created_at: UtcDatetime
    revoked_at: UtcDatetime | None


class KeyCreated(KeyOut):
    key: str = Field(description="the key itself: shown once, stored only as a SHA-256 hash")


class KeyPage(Page[KeyOut]):
    pass


class AuditEventOut(ResponseModel):
    id: int
    at: UtcDatetime
    actor: str = Field(description="the key's name, or cli / system")
    role: Role | None
    api_key_id: int | None
    action: str
    target: str | None = Field(description="what was acted on, as kind/id (job/7, model/2)")
    detail: dict[str, Any] = Field(description="ids, counts, parameters; never patient features")
    request_id: str | None


class AuditPage(Page[AuditEventOut]):
    pass
