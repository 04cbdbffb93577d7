"""Declare, read and report federations (the rules; routes and the worker call these)."""

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.errors import Conflict, NotFound
from app.federation.models import Federation
from app.federation.schemas import FederationCreate
from app.jobs.models import FEDERATED, QUEUED, RUNNING, SUCCEEDED, Job


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


class AlreadyJoined(Conflict):
    kind, title = "federation-already-joined", "This service already takes part"


def get(*, session: Session, federation_id: int, lock: bool = False) -> Federation:
    """``lock``: hold the row until the transaction ends, so that two joins of one federation
    serialise. The UPDATE is the lock on both databases: a row lock on PostgreSQL, SQLite's
    single writer lock (its ``FOR UPDATE`` is a no-op), taken before anything is read."""
    if lock:
        session.execute(update(Federation).where(Federation.id == federation_id)
                        .values(state=Federation.state)
                        .execution_options(synchronize_session=False))
    federation = session.get(Federation, federation_id, with_for_update=lock,
                             populate_existing=lock)
    if federation is None:
        raise FederationNotFound(f"federation {federation_id} does not exist",
                                 field="federation_id")
    return federation


def check_not_joined(*, session: Session, federation_id: int) -> None:
    """One part per service and federation: a second would be averaged under the same site
    name (twice its weight) and charge its patients twice.

    Raises:
        AlreadyJoined: a part is queued, running or finished with the federation's model (409).
    """
    parts = session.scalars(select(Job).where(Job.kind == FEDERATED,
                                              Job.status.in_((QUEUED, RUNNING, SUCCEEDED))))
    for job in parts:
        if (job.payload or {}).get("id") == federation_id:
            raise AlreadyJoined(f"this service already takes part in federation {federation_id} "
                                f"(job {job.id}, {job.status})", field="federation_id")


def list_all(*, session: Session) -> list[Federation]:
    return list(session.scalars(select(Federation).order_by(Federation.id)))


def record_report(*, session: Session, federation_id: int, state: str,
                  report: dict[str, Any]) -> None:
    """The coordinator's report so far (written after every round, and at the end)."""
    federation = get(session=session, federation_id=federation_id)
    federation.state = state
    federation.report = report
