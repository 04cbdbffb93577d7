"""API keys: random secrets shown once, stored as SHA-256 hashes, revoked by a timestamp.

A key reads ``dpk_<public id>_<secret>``: the public id (12 hex digits) is stored and shown, so
keys can be told apart in lists and logs, and no character of the secret (43 characters, 256
random bits) is stored or shown anywhere. A plain SHA-256 of the whole key (not bcrypt or
argon2) is enough because of those 256 bits: no dictionary or brute-force search can invert the
hash, and a fast hash lets every request be checked by one indexed lookup. Keys made before
public ids, and a ``DPCRISIS_ADMIN_KEY`` not in that form, show as ``key-<row id>``.
``DPCRISIS_ADMIN_KEY`` is the one key a person chooses, so it must be long
(``MIN_CHOSEN_KEY_LENGTH``).

The service never revokes the last active admin key: that would leave nobody able to manage
keys over HTTP. The check and the revocation are one conditional UPDATE, behind row locks on the
active admin keys on PostgreSQL (SQLite runs one writer at a time), so two admins revoking each
other's keys at once cannot both succeed.
"""

import hashlib
import logging
import re
import secrets
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from app.auth import audit, key_cache
from app.auth.audit import Action
from app.auth.models import ROLES, ApiKey
from app.auth.principal import Principal
from app.core.database import affected_rows, get_database
from app.core.errors import Conflict, InvalidRequest, NotFound
from app.core.settings import settings
from app.core.time import utcnow

logger = logging.getLogger(__name__)

KEY_PREFIX = "dpk_"
KEY_FORMAT = re.compile(r"dpk_(?P<public_id>[0-9a-f]{12})_[A-Za-z0-9_-]{43}")
"""``dpk_``, the public id (48 random bits, shown), ``_``, the secret (256 random bits)."""
MIN_CHOSEN_KEY_LENGTH = 24
ENV_KEY_NAME = "admin-from-env"
NAME_PATTERN = r"^[A-Za-z0-9._@-]{1,100}$"  # shows in logs and tables: no spaces or markup


class KeyNotFound(NotFound):
    kind = "key-not-found"


class KeyNameTaken(Conflict):
    kind = "key-name-taken"


class LastAdminKey(Conflict):
    kind, title = "last-admin-key", "Last admin key"


def digest(secret: str) -> str:
    """The stored form of a key: hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    """A fresh key: ``dpk_<12 hex digits>_<43 URL-safe characters>`` (256 secret bits)."""
    return f"{KEY_PREFIX}{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def public_id_of(secret: str) -> str | None:
    """The public id of a key in the ``dpk_<public id>_<secret>`` form, else None."""
    match = KEY_FORMAT.fullmatch(secret)
    return match["public_id"] if match else None


def create(
    *, session: Session, name: str, role: str, principal: Principal, secret: str | None = None
) -> tuple[ApiKey, str]:
    """Create a key; returns it with its plaintext, which is never stored and never shown again.

    Raises:
        InvalidRequest: an unknown role or a malformed name (422).
        KeyNameTaken: a key (even a revoked one) already has this name (409).
    """
    if role not in ROLES:
        raise InvalidRequest(f"unknown role {role!r}", field="role", allowed=", ".join(ROLES))
    if not re.fullmatch(NAME_PATTERN, name):
        raise InvalidRequest(f"invalid key name {name!r}", field="name",
                             allowed="1-100 letters, digits and . _ @ -")
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        raise KeyNameTaken(f"a key named {name!r} exists; names are never reused", field="name")
    secret = secret or new_secret()
    public_id = public_id_of(secret)
    if public_id is not None and session.scalar(
            select(ApiKey.id).where(ApiKey.public_id == public_id)) is not None:
        public_id = None  # a chosen key repeating another's public id: shown by its row id
    key = ApiKey(name=name, role=role, public_id=public_id, key_sha256=digest(secret))
    session.add(key)
    session.flush()
    audit.record(session=session, principal=principal, action=Action.KEY_CREATED,
                 target=f"key/{key.id}", detail={"name": name, "role": role})
    return key, secret


def revoke(*, session: Session, key: ApiKey, principal: Principal) -> ApiKey:
    """Revoke a key (idempotent: revoking twice keeps the first time, and records one event).
    The row stays, so the audit log's references to it keep their meaning.

    Raises:
        LastAdminKey: ``key`` is the only active admin key (409); create another one first.
    """
    key_cache.remembered.forget_on_commit(session)
    if key.revoked_at is not None:
        return key
    revocation = update(ApiKey).where(ApiKey.id == key.id, ApiKey.revoked_at.is_(None))
    if key.role == "admin":
        # Row locks on every active admin key (PostgreSQL; SQLite has one writer at a time):
        # a concurrent revocation of another admin key waits, then counts without it.
        session.execute(select(ApiKey.id).where(*_active_admin()).order_by(ApiKey.id)
                        .with_for_update())
        others = (select(func.count()).select_from(ApiKey)
                  .where(*_active_admin(), ApiKey.id != key.id).scalar_subquery())
        revocation = revocation.where(others > 0)
    changed = affected_rows(session.execute(
        revocation.values(revoked_at=utcnow()).execution_options(synchronize_session=False)
    ))
    session.refresh(key)
    if changed:
        audit.record(session=session, principal=principal, action=Action.KEY_REVOKED,
                     target=f"key/{key.id}", detail={"name": key.name, "role": key.role})
    elif key.revoked_at is None:
        raise LastAdminKey(
            f"key {key.name!r} is the last active admin key: revoking it would leave nobody "
            "able to manage keys; create another admin key first", field="key_id")
    return key


def _active_admin() -> tuple[Any, ...]:
    return ApiKey.role == "admin", ApiKey.revoked_at.is_(None)


def get(*, session: Session, key_id: int) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise KeyNotFound(f"no API key with id {key_id}")
    return key


def find(*, session: Session, name_or_id: str) -> ApiKey:
    """A key by name, or by id when no key has that name (the CLI accepts either)."""
    key = session.scalar(select(ApiKey).where(ApiKey.name == name_or_id))
    if key is None and name_or_id.isdigit():
        key = session.get(ApiKey, int(name_or_id))
    if key is None:
        raise KeyNotFound(f"no API key named (or with id) {name_or_id!r}")
    return key


def list_page(*, session: Session, limit: int, offset: int) -> tuple[list[ApiKey], int]:
    total = session.scalar(select(func.count()).select_from(ApiKey)) or 0
    rows = session.scalars(select(ApiKey).order_by(ApiKey.id).limit(limit).offset(offset)).all()
    return list(rows), total


def authenticate(*, session: Session, secret: str) -> ApiKey | None:
    """The active key with this secret, or None (unknown and revoked look the same)."""
    return authenticate_digest(session=session, key_digest=digest(secret))


def authenticate_digest(*, session: Session, key_digest: str) -> ApiKey | None:
    """The active key whose SHA-256 is ``key_digest``, or None."""
    key = session.scalar(select(ApiKey).where(ApiKey.key_sha256 == key_digest))
    if key is None or key.revoked_at is not None:
        return None
    return key


def ensure_admin_key(*, session: Session, secret: str) -> ApiKey | None:
    """Create an admin key with this secret unless one with its hash exists (revoked included:
    a revoked key is never brought back). Returns the new key, or None when nothing was done.

    Raises:
        ValueError: a secret shorter than ``MIN_CHOSEN_KEY_LENGTH``.
    """
    if len(secret) < MIN_CHOSEN_KEY_LENGTH:
        raise ValueError(
            f"DPCRISIS_ADMIN_KEY must be at least {MIN_CHOSEN_KEY_LENGTH} characters "
            "(keys are stored as fast hashes, safe only for long random secrets)"
        )
    existing = session.scalar(select(ApiKey).where(ApiKey.key_sha256 == digest(secret)))
    if existing is not None:
        if existing.revoked_at is not None:
            logger.warning("DPCRISIS_ADMIN_KEY is the revoked key %r; not recreated", existing.name)
        return None
    name = ENV_KEY_NAME
    if session.scalar(select(ApiKey.id).where(ApiKey.name == name)) is not None:
        # The variable changed: keep both, told apart by a random suffix (never by any of
        # the secret: names are shown in lists, logs and the audit log).
        name = f"{ENV_KEY_NAME}-{secrets.token_hex(4)}"
    key, _ = create(session=session, name=name, role="admin", principal=Principal.system(),
                    secret=secret)
    logger.info("created admin API key %r from DPCRISIS_ADMIN_KEY", name)
    return key


def count_active(*, session: Session) -> int:
    return session.scalar(
        select(func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None))
    ) or 0



def on_startup() -> None:
    """Create ``DPCRISIS_ADMIN_KEY``'s admin key when it is set, and say how to get a first key
    when the service has none (every API route needs one).

    Raises:
        ValueError: ``DPCRISIS_ADMIN_KEY`` is too short.
    """
    secret = settings.dpcrisis_admin_key
    if secret is not None:
        try:
            with get_database().session_scope() as session:
                ensure_admin_key(session=session, secret=secret.get_secret_value())
        except IntegrityError:  # another API process created it at the same moment
            logger.info("the DPCRISIS_ADMIN_KEY admin key was created by another process")
    try:
        with get_database().session_scope() as session:
            active = count_active(session=session)
    except SQLAlchemyError:  # not migrated yet: /readyz says so; nothing to advise here
        return
    if active == 0:
        logger.warning(
            "no API key exists: every /v1 route answers 401 until one does. Create one with "
            "`dpcrisis keys create --role admin --name ops`, or set DPCRISIS_ADMIN_KEY"
        )
