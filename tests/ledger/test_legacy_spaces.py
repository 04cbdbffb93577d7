"""Datasets registered before patient spaces: their patients join the organisation's space, so
a table of the same patients uploaded again does not give them a second budget."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import Database
from app.core.settings import settings
from app.datasets.models import AWAITING_DATA, Dataset
from app.datasets.patients import identity
from app.flows import patient_spaces
from app.ledger import left_out, space_chain, spaces
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.ledger.spaces import PatientSpace, SpaceKind
from app.privacy.accounting import create_accountant
from tests.ledger.test_patient_budget import SCHEMA, _job, _table, _upload

PLD = create_accountant("prv")


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _reading(entries: list[LedgerEntry], datasets: list[int]) -> list[LedgerEntry]:
    """The charged ``entries`` whose release read the patients of a block holding
    ``datasets``: all of them, but those that left such patients out."""
    return [entry for entry in entries if left_out.reads(entry, datasets)]


def _per_patient(db: Database, space_id: int) -> dict[tuple[int, ...], tuple[float, float, int]]:
    """Each live block of the space: the composed spend of the charged entries that read its
    patients, by the space's filter and by PLD at its delta, and how many there are."""
    found = {}
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None
        for block in spaces.live_blocks(session=session, space_id=space_id):
            charged = ledger_spend.charged_by_dataset(session=session,
                                                      dataset_ids=set(block.datasets))
            entries = _reading([e for d in block.datasets for e in charged.get(d, [])],
                               block.datasets)
            pld = PLD.epsilon([ledger_spend.event_of(e) for e in entries], space.budget_delta) \
                if entries else 0.0
            found[tuple(block.datasets)] = (
                ledger_spend.filtered_epsilon(space.guard, entries), pld, len(entries))
    return found


def _verified(db: Database, *space_ids: int) -> None:
    with db.session_scope() as session:
        for space_id in space_ids:
            space = session.get(PatientSpace, space_id)
            assert space is not None
            checked = space_chain.verify(session=session, space=space)
            assert checked.valid, (space_id, checked.first_invalid)


def _awaiting_legacy(db: Database, schema: dict[str, Any]) -> tuple[int, int]:
    """A private upload registered before spaces, awaiting its rows, as migration 0019 left
    it: a space of its own, no block; its id and its space's."""
    with db.session_scope() as session:
        space = spaces.new_space(session=session, kind=SpaceKind.DATASET, epsilon=8,
                                 delta=1e-6)
        space_chain.append_budget(session=session, space=space)
        dataset = Dataset(name="before-spaces", source_kind="upload", n_rows=0, n_train=0,
                          seed=0, schema_json=schema, schema_hash="0" * 64,
                          state=AWAITING_DATA, ledger_version=0, budget_epsilon=8,
                          budget_delta=1e-6, filter_order=space.filter_order,
                          patient_space_id=space.id, coin_scheme=identity.CURRENT_SCHEME)
        session.add(dataset)
        session.flush()
        return dataset.id, space.id


def _without_ids(table: bytes) -> bytes:
    """``_table``'s CSV without its patient_id column (its first)."""
    return "".join(f"{row.split(',', 1)[1]}\n" for row in table.decode().splitlines()).encode()


def _ready_legacy(client: TestClient, db: Database, ids: list[str], schema: dict[str, Any],
                  seed: int = 0) -> tuple[int, int]:
    """A private upload that received its rows before spaces, as migrations 0019 and 0021
    left it: its stored table, a space of its own with its budget, one block of its rows
    opened by a chained record. (Its rows are sent as a public table, then made what such a
    registration was.)"""
    created = client.post("/v1/datasets", json={
        "name": "before-spaces", "source": {"kind": "upload"}, "schema": schema,
        "public": True})
    assert created.status_code == 201, created.text
    dataset_id = int(created.json()["id"])
    table = _table(ids, seed) if schema.get("id_column") else _without_ids(_table(ids, seed))
    sent = client.put(f"/v1/datasets/{dataset_id}/data", content=table,
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text
    with db.session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        space = spaces.new_space(session=session, kind=SpaceKind.DATASET, epsilon=8,
                                 delta=1e-6)
        space_chain.append_budget(session=session, space=space)
        dataset.public, dataset.budget_epsilon, dataset.budget_delta = False, 8, 1e-6
        dataset.filter_order, dataset.patient_space_id = space.filter_order, space.id
        session.flush()
        block = spaces.open_block(session=session, space_id=space.id, datasets=[dataset_id],
                                  size=dataset.n_rows)
        space_chain.append_opened(session=session, space=space, dataset_id=dataset_id,
                                  block=block)
        ledger_service.record_budget(session=session, dataset=dataset)
        return dataset_id, space.id


def _space_of(db: Database, dataset_id: int) -> int:
    with db.session_scope() as session:
        space_id = session.scalar(select(Dataset.patient_space_id)
                                  .where(Dataset.id == dataset_id))
        assert space_id is not None
        return int(space_id)


def test_a_legacy_datasets_patients_uploaded_again_have_one_budget(any_client: TestClient,
                                                                  any_db: Database) -> None:
    """A registration from before spaces and a later private upload of the same patients (a
    re-export: same ids, other values): per patient, the releases that read them compose
    within the one per-patient budget (the second job is refused, or leaves them out)."""
    legacy, own_space = _awaiting_legacy(any_db, SCHEMA)
    ids = [f"p-{i}" for i in range(3000)]
    sent = any_client.put(f"/v1/datasets/{legacy}/data", content=_table(ids, seed=0),
                          headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text
    re_export = _upload(any_client, ids, "re-export", seed=1)
    assert _job(any_client, legacy, 7.9).status_code == 202
    second = _job(any_client, re_export, 7.9)
    assert second.status_code in (202, 409), second.text
    organisation = _space_of(any_db, legacy)
    assert organisation == _space_of(any_db, re_export) != own_space
    spend = _per_patient(any_db, organisation)
    assert set(spend) == {(legacy, re_export)}  # one block: the 3,000 patients of both
    filtered, pld, read = spend[(legacy, re_export)]
    assert read >= 1 and filtered <= 8.0 and pld <= 8.0, spend
    _verified(any_db, organisation, own_space)


def test_a_legacy_upload_with_rows_is_folded_into_the_organisation_space(
        any_client: TestClient, any_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stored ids are keyed into the organisation's space at start-up, its own block is
    closed, both chains verify, and its spend before the fold counts for its patients."""
    ids = [f"f-{i}" for i in range(3000)]
    legacy, own_space = _ready_legacy(any_client, any_db, ids, SCHEMA)
    with monkeypatch.context() as before_this_code:  # a job admitted before the fold's rule
        before_this_code.setattr(spaces, "check_keyed", lambda **_: None)
        assert _job(any_client, legacy, 7.9).status_code == 202
    unfolded = any_client.post(f"/v1/datasets/{legacy}/statistics", json={
        "queries": [{"kind": "count"}], "privacy": {"epsilon": 0.5}})
    assert unfolded.status_code == 409, unfolded.text  # until it is folded, no release
    assert unfolded.json()["type"].endswith("/patient-ids-required")

    assert patient_spaces.fold_legacy(database=any_db) == [legacy]
    assert patient_spaces.fold_legacy(database=any_db) == []  # once
    organisation = _space_of(any_db, legacy)
    assert organisation != own_space
    with any_db.session_scope() as session:
        assert spaces.live_blocks(session=session, space_id=own_space) == []
        (block,) = spaces.live_blocks(session=session, space_id=organisation)
        assert (block.datasets, block.size) == ([legacy], 3000)
    _verified(any_db, organisation, own_space)

    re_export = _upload(any_client, ids[:2000] + [f"g-{i}" for i in range(1000)],
                        "re-export", seed=1)
    second = _job(any_client, re_export, 7.9)
    assert second.status_code in (202, 409), second.text
    spend = _per_patient(any_db, organisation)
    assert set(spend) == {(legacy,), (legacy, re_export), (re_export,)}
    shared_filtered, shared_pld, read = spend[(legacy, re_export)]
    assert read >= 1 and shared_filtered <= 8.0 and shared_pld <= 8.0, spend
    assert spend[(legacy,)][2] == 1  # the legacy job counts for its patients
    _verified(any_db, organisation, own_space)


def test_a_legacy_dataset_without_ids_takes_no_release(client: TestClient,
                                                       db: Database) -> None:
    """Its rows carry no patient ids, so it cannot be folded: every kind of release on it
    gets a 409 problem+json whose detail names what its steward must do."""
    legacy, own_space = _ready_legacy(client, db, [f"x-{i}" for i in range(3000)],
                                      {**SCHEMA, "id_column": None})
    assert patient_spaces.fold_legacy(database=db) == []
    assert _space_of(db, legacy) == own_space
    for refused in (_job(client, legacy, 1.0),
                    client.post(f"/v1/datasets/{legacy}/statistics", json={
                        "queries": [{"kind": "count"}], "privacy": {"epsilon": 0.5}})):
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        body = refused.json()
        assert body["type"].endswith("/patient-ids-required")
        assert "data steward must declare the patient ids" in body["detail"]
    assert client.get(f"/v1/datasets/{legacy}/privacy-report").json()["entries"] == []


def test_a_legacy_registration_without_ids_is_refused_its_rows(client: TestClient,
                                                               db: Database) -> None:
    """Awaiting its rows without an id column, it cannot join the organisation's space: the
    upload is refused before its body is read, with the steward's way out."""
    legacy, _ = _awaiting_legacy(db, {**SCHEMA, "id_column": None})
    sent = client.put(f"/v1/datasets/{legacy}/data",
                      content=_without_ids(_table([str(i) for i in range(500)])),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 409, sent.text
    problem = sent.json()
    assert problem["type"].endswith("/patient-ids-required")
    assert f"DELETE /v1/datasets/{legacy}" in problem["detail"]
    assert client.get(f"/v1/datasets/{legacy}").json()["state"] == "awaiting_data"
