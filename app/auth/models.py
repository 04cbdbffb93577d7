"""API keys (stored only as SHA-256 hashes) and the audit log of who did what."""

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, CheckConstraint, DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow
from app.core.vocabulary import StrEnumColumn

# What each role may call is the table in docs/api.md ("Keys, roles and the audit log"), held
# route by route in tests/auth/test_route_roles.py. A data steward registers datasets, sends and
# erases their rows and reads their exact intake facts; a data scientist sees data only through
# DP releases (docs/privacy.md, "What each role can learn").


class Role(StrEnum):
    """Who a key speaks for."""

    ADMIN = "admin"
    DATA_STEWARD = "data_steward"
    DATA_SCIENTIST = "data_scientist"
    PRIVACY_OFFICER = "privacy_officer"
    CLINICIAN = "clinician"


ROLES = tuple(role.value for role in Role)  # plain strings: the CHECK constraint quotes them


class ApiKey(Base):
    """A caller's key. The secret is shown once at creation; only its hash is kept."""

    __tablename__ = "api_key"
    __table_args__ = (CheckConstraint(f"role IN {ROLES!r}", name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[Role] = mapped_column(StrEnumColumn(Role, 32))
    # The public part of a key ``dpk_<public_id>_<secret>`` (not secret), to tell keys apart;
    # None for keys made before keys had one (they show as ``key-<id>``).
    public_id: Mapped[str | None] = mapped_column(String(12), nullable=True, unique=True,
                                                  index=True)
    key_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    @property
    def display_id(self) -> str:
        """How lists, logs and the CLI name the key: ``dpk_<public_id>`` (the key's start) or,
        for a key without a public id, ``key-<id>``; never any of the secret."""
        return f"dpk_{self.public_id}" if self.public_id else f"key-{self.id}"


class AuditEvent(Base):
    """One action by one caller. Never holds patient features (scoring records a count)."""

    __tablename__ = "audit_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_key.id"), nullable=True)
    actor: Mapped[str] = mapped_column(String(100))  # key name, or "cli" / "system"
    role: Mapped[str | None] = mapped_column(String(32), nullable=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str | None] = mapped_column(String(200), nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
