"""Declare, read and report federations (the rules; routes and the worker call these)."""

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.federation.models import Federation
from app.federation.schemas import FederationCreate


class FederationNotFound(NotFound):
    kind, title = "federation-not-found", "No such federation"


def create(*, session: Session, request: FederationCreate) -> Federation:
    federation = Federation(
        name=request.name, role=request.role, address=request.address,
        schema_sha256=request.schema_sha256, recipe=request.recipe.model_dump(mode="json"),
        sites=[site.model_dump(mode="json") for site in request.sites],
        site_name=request.site_name, state="declared", report=None,
    )
    session.add(federation)
    session.flush()
    return federation


def get(*, session: Session, federation_id: int) -> Federation:
    federation = session.get(Federation, federation_id)
    if federation is None:
        raise FederationNotFound(f"federation {federation_id} does not exist",
                                 field="federation_id")
    return federation


def list_all(*, session: Session) -> list[Federation]:
    return list(session.scalars(select(Federation).order_by(Federation.id)))


def record_report(*, session: Session, federation_id: int, state: str,
                  report: dict[str, Any]) -> None:
    """The coordinator's report so far (written after every round, and at the end)."""
    federation = get(session=session, federation_id=federation_id)
    federation.state = state
    federation.report = report
