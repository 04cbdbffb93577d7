"""What CDS Hooks keeps: the JWT ids already seen (no replay), and the feedback EHRs send."""

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow


class CdsTokenSeen(Base):
    """One accepted CDS client JWT, until it expires: its (iss, jti) again is a replay.

    Only a SHA-256 of the pair is kept (any length of iss and jti fits one key). The primary
    key is what makes a replay fail across several API processes on one database: the second
    insert of the same pair violates it, whichever process tries.
    """

    __tablename__ = "cds_token_seen"

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class CdsFeedback(Base):
    """One card outcome an EHR reported (CDS Hooks feedback); no patient data, no comment."""

    __tablename__ = "cds_feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    service_id: Mapped[str] = mapped_column(String(64))
    card: Mapped[str] = mapped_column(String(64), index=True)
    outcome: Mapped[str] = mapped_column(String(16))
    outcome_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    override_reason: Mapped[str | None] = mapped_column(String(300), nullable=True)
    accepted_suggestions: Mapped[int] = mapped_column(Integer, default=0)
    actor: Mapped[str] = mapped_column(String(100))  # the key's name, or cds:<iss>
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_key.id"), nullable=True)
