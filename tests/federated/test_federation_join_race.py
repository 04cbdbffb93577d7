"""Simultaneous joins of one federation by one service are one join, on SQLite as on
PostgreSQL: a second part would be averaged under the same site name and charge the same
patients twice, so the check and the join must not interleave."""

import threading

from sqlalchemy import select

from app.auth.principal import Principal
from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.federation.schemas import FederationCreate, FederationJoin
from app.federation.service import AlreadyJoined
from app.flows import federation as federation_flow
from app.jobs.models import FEDERATED, Job
from app.ledger.models import LedgerEntry
from tests.conftest import small_dataset
from tests.federated.test_federation_api import federation

JOINS = 6


def test_simultaneous_joins_of_one_site_are_one_join(any_db: Database) -> None:
    with any_db.session_scope() as session:
        federation_id = federation_flow.declare(
            session=session, request=FederationCreate.model_validate(federation()),
            principal=Principal.cli()).id
        dataset_id = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset())).id
    outcomes: list[str] = []
    lock, start = threading.Lock(), threading.Barrier(JOINS)

    def join() -> None:
        start.wait()
        try:
            with any_db.session_scope() as session:
                federation_flow.join(session=session, federation_id=federation_id,
                                     request=FederationJoin(dataset_id=dataset_id),
                                     principal=Principal.cli())
            outcome = "joined"
        except AlreadyJoined:
            outcome = "refused"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=join) for _ in range(JOINS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["joined"] + ["refused"] * (JOINS - 1), outcomes
    with any_db.session_scope() as session:
        parts = list(session.scalars(select(Job).where(Job.kind == FEDERATED)))
        entries = list(session.scalars(select(LedgerEntry).where(
            LedgerEntry.dataset_id == dataset_id)))
    assert len(parts) == 1 and len(entries) == 1
