"""``Idempotency-Key`` for resource-creating POSTs: a retried request never acts twice.

A key is remembered per API key and route, with a SHA-256 of the request's canonical body and
the id of the resource it created, *in the same transaction* as the resource (and, for a job,
its budget reservation). A retry by the same caller with the same key and body gets the same
resource back; the same key with another body is a 422. Keys are the caller's own: another API
key sending the same ``Idempotency-Key`` (clients often count 1, 2, 3...) acts anew and never
sees the first caller's resource. Two concurrent first attempts race on the (API key, route,
key) unique constraint: the loser's whole transaction (its reservation included) rolls back and
it answers with the winner's resource, so a retry after a timeout never reserves budget twice.
"""

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import Header
from pydantic import BaseModel
from sqlalchemy import DateTime, ForeignKey, Integer, String, UniqueConstraint, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from app.core.database import Base
from app.core.errors import InvalidRequest
from app.core.schemas import ALLOWED_RANGES
from app.core.time import utcnow

KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"  # printable ASCII, no spaces, as HTTP header values go
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=KEY_PATTERN,
        description="retry-safe creation: the same key and body return the same resource",
    ),
]
# Shown as "allowed" in the 422 for a malformed key.
ALLOWED_RANGES.setdefault("Idempotency-Key", "1-200 printable ASCII characters, no spaces")


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_key"
    __table_args__ = (UniqueConstraint("api_key_id", "route", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Whose key it is: a record is replayed only to the API key that made it.
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_key.id"), nullable=True)
    route: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(200))
    body_sha256: Mapped[str] = mapped_column(String(64))
    resource_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class KeyReused(InvalidRequest):
    kind, title = "idempotency-key-reused", "Idempotency-Key reused with another body"


def body_digest(body: BaseModel) -> str:
    """SHA-256 of the validated body as canonical JSON (key order and spacing do not matter)."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _replay(session: Session, owner: int, route: str, key: str, digest: str) -> int | None:
    record = session.scalar(
        select(IdempotencyRecord).where(
            IdempotencyRecord.api_key_id == owner, IdempotencyRecord.route == route,
            IdempotencyRecord.key == key,
        )
    )
    if record is None:
        return None
    if record.body_sha256 != digest:
        raise KeyReused(
            f"Idempotency-Key {key!r} was first used with another body on {route}",
            field="Idempotency-Key",
        )
    return record.resource_id


def create_once(
    *,
    session: Session,
    owner: int | None,
    route: str,
    key: str | None,
    body: BaseModel,
    create: Callable[[], int],
) -> tuple[int, bool]:
    """Run ``create`` (returns the new resource's id) at most once per (``owner``, route, key).

    ``owner`` is the calling API key's id; without one (the CLI, the service itself) or
    without a key, ``create`` simply runs.

    The key's record is flushed in the caller's transaction (which the route's unit of work
    commits); when a concurrent attempt with the same key committed first, the flush fails,
    this attempt is rolled back whole (its reservation included) and the winner is replayed.
    Returns ``(resource_id, replayed)``.

    Raises:
        KeyReused: the key was used before with a different body.
    """
    if key is None or owner is None:
        return create(), False
    digest = body_digest(body)
    existing = _replay(session, owner, route, key, digest)
    if existing is not None:
        return existing, True
    resource_id = create()
    session.add(IdempotencyRecord(api_key_id=owner, route=route, key=key, body_sha256=digest,
                                  resource_id=resource_id))
    try:
        session.flush()
    except IntegrityError:
        session.rollback()  # another attempt with this key won: drop ours, reservation included
        existing = _replay(session, owner, route, key, digest)
        if existing is None:
            raise
        return existing, True
    return resource_id, False


def replay_headers(replayed: bool) -> dict[str, Any]:
    return {"Idempotency-Replayed": "true"} if replayed else {}
