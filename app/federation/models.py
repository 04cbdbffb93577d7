"""A federation as one service declared it: as its coordinator, or as one of its sites.

The coordinator's row holds the round-by-round report its Flower server writes (which sites
took part in which round, the federation's statement and its summed DP evaluation); a site's
row names the coordinator it connects to and which of the declared sites it is. A site's part
in a run is a job (kind ``federated``) whose ``training`` names this row.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow


class Federation(Base):
    __tablename__ = "federation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))  # "coordinator" | "site"
    address: Mapped[str] = mapped_column(String(256))  # the coordinator's Flower server
    schema_sha256: Mapped[str] = mapped_column(String(64))
    recipe: Mapped[dict[str, Any]] = mapped_column(JSON)
    sites: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    site_name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default="declared")
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
