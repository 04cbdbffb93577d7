"""The patient spaces' chain covers the blocks: every upload keyed into the
organisation's space and every dataset's own block is a "blocks" record, and verification
replays them against the blocks in the table, so an edited ``datasets``, ``size`` or
``closed_at`` (a block reopened, or closed at another time than its record), or a block row
deleted or added, shows; the budget records still verify."""

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from app.core.database import Database
from app.datasets.models import Dataset
from app.ledger import space_chain, spaces
from app.ledger.hashing import iso_utc, record_hash
from app.ledger.spaces import PatientBlock
from tests.conftest import small_dataset
from tests.ledger.test_patient_budget import BUDGET, SCHEMA, _table, _upload

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _failure(session: Session, space: spaces.PatientSpace) -> str:
    verified = space_chain.verify(session=session, space=space)
    assert not verified.valid and verified.first_invalid is not None
    return verified.first_invalid.reason


def _edit(session: Session, block_id: int, **values: Any) -> None:
    session.execute(update(PatientBlock).where(PatientBlock.id == block_id).values(**values))


def test_uploads_chain_their_blocks_and_an_edited_block_shows(
    any_client: TestClient, any_db: Database
) -> None:
    cohort = [f"p-{i}" for i in range(1000)]
    north = _upload(any_client, cohort, "north")
    assert any_client.put("/v1/patient-budget",
                          json={"epsilon": 9, "delta": 1e-6}).status_code == 200
    south = _upload(any_client, cohort[:600] + [f"s-{i}" for i in range(50)], "south", 1)
    with any_db.session_scope() as session:
        space = spaces.organisation(session=session)
        verified = space_chain.verify(session=session, space=space)
        assert verified.valid and verified.budget_anchored and verified.records == 4
        chain = space_chain.records(session=session, space_id=space.id)
        assert [r.kind for r in chain] == ["budget", "blocks", "budget", "blocks"]
        split = chain[3].blocks
        assert split is not None and split["dataset"] == south and len(split["closed"]) == 1
        assert sorted((b["datasets"], b["size"]) for b in split["opened"]) == [
            ([north], 400), ([north, south], 600), ([south], 50)]
        live = {tuple(b.datasets): b for b in spaces.live_blocks(session=session,
                                                                 space_id=space.id)}
        shared, alone = live[(north, south)], live[(north,)]
        (closed_id,) = split["closed"]

        _edit(session, shared.id, datasets=[south])
        assert _failure(session, space) == f"block {shared.id} has datasets other than the chain's"
        _edit(session, shared.id, datasets=[north, south])
        _edit(session, alone.id, size=401)
        assert _failure(session, space) == f"block {alone.id} has a size other than the chain's"
        _edit(session, alone.id, size=400)
        _edit(session, alone.id, closed_at=T0)
        assert _failure(session, space).startswith(f"block {alone.id} is live in the chain but")
        _edit(session, alone.id, closed_at=None)
        when = session.scalar(select(PatientBlock.closed_at).where(PatientBlock.id == closed_id))
        _edit(session, closed_id, closed_at=None)
        assert _failure(session, space).startswith(f"block {closed_id} is live in the table but")
        _edit(session, closed_id, closed_at=T0)  # closed, but at another time than the chain's
        assert _failure(session, space) == (f"block {closed_id} has a closed_at other than the "
                                            "time of the record that closed it")
        _edit(session, closed_id, closed_at=when)
        assert space_chain.verify(session=session, space=space).valid
        added = session.scalar(insert(PatientBlock).returning(PatientBlock.id).values(
            space_id=space.id, datasets=[south], size=3, created_at=T0))
        assert _failure(session, space).startswith(f"block {added} is live in the table but")
        session.execute(delete(PatientBlock).where(PatientBlock.id == added))
        assert space_chain.verify(session=session, space=space).valid
        session.execute(delete(PatientBlock).where(PatientBlock.id == shared.id))
        assert _failure(session, space).startswith(f"block {shared.id} is live in the chain but")


def test_budget_records_hash_as_before_the_blocks_field(any_db: Database) -> None:
    """A budget record's content has no ``blocks`` field: the hashes written before it (by
    migration 0020 and every budget change) still verify."""
    with any_db.session_scope() as session:
        space = spaces.organisation(session=session)
        (first,) = space_chain.records(session=session, space_id=space.id)
        before = {"space_id": space.id, "seq": 1, "kind": "budget",
                  "created_at": iso_utc(first.created_at),
                  "budget": {"epsilon": first.budget_epsilon, "delta": first.budget_delta},
                  "filter_order": first.filter_order}
        assert first.blocks is None and record_hash(before, first.prev_hash) == first.hash
        assert space_chain.verify(session=session, space=space).valid


@pytest.mark.parametrize("column", ["size", "datasets"])
def test_a_generators_own_block_is_chained(client: TestClient, db: Database,
                                           column: str) -> None:
    created = client.post("/v1/datasets", json=small_dataset())
    assert created.status_code == 201, created.text
    with db.session_scope() as session:
        dataset = session.get(Dataset, created.json()["id"])
        assert dataset is not None and dataset.patient_space_id is not None
        space = session.get(spaces.PatientSpace, dataset.patient_space_id)
        assert space is not None
        verified = space_chain.verify(session=session, space=space)
        assert verified.valid and verified.budget_anchored and verified.records == 2
        (block,) = session.scalars(select(PatientBlock).where(PatientBlock.space_id == space.id))
        assert space_chain.records(session=session, space_id=space.id)[1].blocks == {
            "dataset": dataset.id, "closed": [],
            "opened": [{"id": block.id, "datasets": [dataset.id], "size": dataset.n_rows}]}
        _edit(session, block.id, **{"size": 1} if column == "size" else {"datasets": [0]})
        assert _failure(session, space).startswith(f"block {block.id} has")


def _create(client: TestClient, name: str) -> int:
    created = client.post("/v1/datasets", json={
        "name": name, "source": {"kind": "upload"}, "schema": SCHEMA, "privacy_budget": BUDGET})
    assert created.status_code == 201, created.text
    return int(created.json()["id"])


def _put(client: TestClient, dataset_id: int, ids: list[str]) -> None:
    sent = client.put(f"/v1/datasets/{dataset_id}/data", content=_table(ids, dataset_id),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text


def test_split_blocks_keep_their_datasets_whatever_the_stored_text_and_the_upload_order(
    any_client: TestClient, any_db: Database
) -> None:
    """A split block's parts reuse its stored JSON text (the new dataset appended when it is
    the newest): an older dataset uploaded last goes in the middle of the lists, and a
    stored text in another spacing is reused as it is; the blocks stay each patient's
    datasets and the chain verifies."""
    cohorts = {"a": range(0, 600), "b": range(300, 900), "c": range(500, 1200),
               "d": range(0, 1200, 7)}
    made = {name: _create(any_client, name) for name in cohorts}  # ids in the order a < b < c < d
    ids = {name: [f"p-{i}" for i in members] for name, members in cohorts.items()}
    _put(any_client, made["a"], ids["a"])
    _put(any_client, made["c"], ids["c"])
    with any_db.session_scope() as session:  # one live block stored compact, as JSON allows
        space = spaces.organisation(session=session)
        (both,) = [b for b in spaces.live_blocks(session=session, space_id=space.id)
                   if b.datasets == [made["a"], made["c"]]]
        if any_db.url.startswith("sqlite"):  # (PostgreSQL's driver gives lists, not texts)
            session.connection().exec_driver_sql(
                f"UPDATE {PatientBlock.__tablename__} SET datasets = ? WHERE id = ?",
                (f"[{made['a']},{made['c']}]", both.id))
    _put(any_client, made["b"], ids["b"])  # older than c: between a and c in the lists
    _put(any_client, made["d"], ids["d"])  # the newest: appended
    patterns = Counter(tuple(sorted(made[n] for n in cohorts if i in cohorts[n]))
                       for i in range(1200))
    with any_db.session_scope() as session:
        space = spaces.organisation(session=session)
        live: Counter[tuple[int, ...]] = Counter()
        for block in spaces.live_blocks(session=session, space_id=space.id):
            live[tuple(block.datasets)] += block.size
        assert live == patterns
        assert space_chain.verify(session=session, space=space).valid
