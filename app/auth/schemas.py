"""Request and response bodies of the keys and audit-log APIs."""

from typing import Annotated, Any

from pydantic import Field

from app.auth.models import Role as Role  # defined there, once
from app.auth.service import NAME_PATTERN
from app.core.schemas import Page, RequestModel, ResponseModel, UtcDatetime
from app.privacy.annotations import PUBLIC, Released
from app.privacy.releases import Release

DETAIL = Released(
    Release.PUBLIC_INPUT, Release.PUBLIC_BY_CONVENTION, Release.LEDGER, Release.INTAKE,
    note="the action's request (budgets, targets, thresholds), a registration's n_rows, a ledger "
    "check's result, how many patients a scoring call scored (never a value); an upload's row "
    "count; its imputed counts and the SHA-256 of the clinic's file are intake facts served only "
    "to admins and data stewards, who hold the table (withheld from privacy officers, who see "
    "their names under 'withheld')")


class KeyCreate(RequestModel):
    name: str = Field(pattern=NAME_PATTERN,
                      description="unique, never reused: who or what holds the key")
    role: Role


class KeyOut(ResponseModel):
    """A key as the API and the CLI show it: never the hash, never the secret."""

    id: Annotated[int, PUBLIC]
    name: Annotated[str, PUBLIC]
    role: Annotated[Role, PUBLIC]
    prefix: Annotated[str, PUBLIC] = Field(
        validation_alias="display_id",
        description="the key's public part, dpk_<public id> (the key starts with it), or key-<id> "
        "for a key made before keys had one; never any of the secret",
    )
    created_at: Annotated[UtcDatetime, PUBLIC]
    revoked_at: Annotated[UtcDatetime | None, PUBLIC]


class KeyCreated(KeyOut):
    key: Annotated[str, PUBLIC] = Field(
        description="the key itself: shown once, stored only as a SHA-256 hash")


class KeyPage(Page[KeyOut]):
    pass


class AuditEventOut(ResponseModel):
    id: Annotated[int, PUBLIC]
    at: Annotated[UtcDatetime, PUBLIC]
    actor: Annotated[str, PUBLIC] = Field(description="the key's name, or cli / system")
    role: Annotated[Role | None, PUBLIC]
    api_key_id: Annotated[int | None, PUBLIC]
    action: Annotated[str, PUBLIC]
    target: Annotated[str | None, PUBLIC] = Field(
        description="what was acted on, as kind/id (job/7, model/2)")
    detail: Annotated[dict[str, Any], DETAIL] = Field(
        description="ids, counts, parameters; never patient features")
    request_id: Annotated[str | None, PUBLIC]


class AuditPage(Page[AuditEventOut]):
    pass
