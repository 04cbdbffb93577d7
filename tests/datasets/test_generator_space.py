"""A generator dataset's patients are its seed's rows: every private generator dataset of one
seed is in that seed's patient space, so a re-registration (a shift, another size) shares
their spend instead of giving them a second budget."""

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import Database
from app.core.settings import settings
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.datasets.patients import generator_space, index_files, patient_index
from app.datasets.schemas import DatasetCreate
from app.flows import patient_spaces
from app.ledger import service as ledger_service
from app.ledger import space_chain, spaces
from app.ledger.spaces import PatientSpace, SpaceKind
from tests.ledger.test_legacy_spaces import _per_patient, _space_of, _verified


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _generator(client: TestClient, n_rows: int, seed: int, epsilon: float = 8,
               shift: str | None = None, status: int = 201) -> int:
    source = {"kind": "synthetic", "n_rows": n_rows, "seed": seed,
              **({"shift": shift} if shift else {})}
    made = client.post("/v1/datasets", json={"name": f"seed-{seed}", "source": source,
                                              "privacy_budget": {"epsilon": epsilon,
                                                                 "delta": 1e-5}})
    assert made.status_code == status, made.text
    return int(made.json()["id"]) if status == 201 else 0


def _job(client: TestClient, dataset_id: int, epsilon: float) -> int:
    made = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                         "privacy": {"target_epsilon": epsilon},
                                         "training": {"epochs": 2, "batch_size": 256}})
    assert made.status_code in (202, 409), made.text
    return made.status_code


def _live(db: Database, space_id: int) -> dict[tuple[int, ...], int]:
    with db.session_scope() as session:
        return {tuple(b.datasets): b.size
                for b in spaces.live_blocks(session=session, space_id=space_id)}


def test_a_re_registration_with_a_shift_shares_its_seeds_patients(any_client: TestClient,
                                                                  any_db: Database) -> None:
    first = _generator(any_client, 2000, 7)
    assert _job(any_client, first, 7.9) == 202
    _generator(any_client, 2000, 7, status=409)  # the plain repeat is the same source
    shifted = _generator(any_client, 2000, 7, shift="subgroup_effect")
    space_id = _space_of(any_db, first)
    assert _space_of(any_db, shifted) == space_id
    with any_db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.kind == SpaceKind.GENERATOR
        assert space.source_key == "synthetic:7" and space.budget_epsilon == 8
    assert _live(any_db, space_id) == {(first, shifted): 2000}
    _job(any_client, shifted, 7.9)  # refused, or it leaves the spent patients out
    filtered, _, read = _per_patient(any_db, space_id)[(first, shifted)]
    assert read >= 1 and filtered <= 8.0

    larger = _generator(any_client, 3000, 7)  # row i is patient i: the first 2,000 are shared
    assert _live(any_db, space_id) == {(first, shifted, larger): 2000, (larger,): 1000}
    assert _space_of(any_db, _generator(any_client, 2000, 8)) != space_id  # another seed
    _verified(any_db, space_id)

    # Once the seed's patients are shared, one dataset's budget no longer moves theirs.
    raised = any_client.put(f"/v1/datasets/{first}/privacy-budget",
                            json={"epsilon": 12, "delta": 1e-5})
    assert raised.status_code == 200, raised.text
    with any_db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.budget_epsilon == 8


def test_each_generated_row_is_found_in_its_block(client: TestClient, db: Database) -> None:
    """A release finds a generator dataset's row i as it finds an upload's: the digest of
    its id (``generator_space.row_ids``) under the seed space's secret, in the index."""
    small, large = _generator(client, 2000, 21), _generator(client, 3000, 21)
    space_id = _space_of(db, large)
    with db.session_scope() as session:
        space = session.get(PatientSpace, space_id)
        assert space is not None and space.secret is not None
        words = patient_index.digests(generator_space.row_ids(3000), space)
        order = np.argsort(words)
        known, found = index_files.load(space).blocks_of(words[order])
        blocks = np.empty(3000, np.int64)
        blocks[order] = found
        datasets = {b.id: tuple(b.datasets)
                    for b in spaces.live_blocks(session=session, space_id=space_id)}
    assert known.all()
    assert {datasets[b] for b in blocks[:2000].tolist()} == {(small, large)}
    assert {datasets[b] for b in blocks[2000:].tolist()} == {(large,)}


def _before_seed_spaces(db: Database, n_rows: int, seed: int, epsilon: float,
                        shift: str | None = None) -> tuple[int, int]:
    """A generator dataset as migration 0019 left it: a space of its own with its budget, one
    block of its rows opened by a chained record; its id and its space's."""
    with db.session_scope() as session:
        request = DatasetCreate.model_validate({
            "name": "before-seed-spaces", "privacy_budget": {"epsilon": epsilon, "delta": 1e-5},
            "source": {"kind": "synthetic", "n_rows": n_rows, "seed": seed, "shift": shift}})
        dataset = dataset_service._synthetic(session, request)
        space = spaces.new_space(session=session, kind=SpaceKind.DATASET, epsilon=epsilon,
                                 delta=1e-5)
        space_chain.append_budget(session=session, space=space)
        dataset.name, dataset.public = "before-seed-spaces", False
        dataset.budget_epsilon, dataset.budget_delta = epsilon, 1e-5
        dataset.filter_order, dataset.patient_space_id = space.filter_order, space.id
        session.add(dataset)
        session.flush()
        block = spaces.open_block(session=session, space_id=space.id, datasets=[dataset.id],
                                  size=n_rows)
        space_chain.append_opened(session=session, space=space, dataset_id=dataset.id,
                                  block=block)
        ledger_service.record_budget(session=session, dataset=dataset)
        return dataset.id, space.id


def test_generator_datasets_from_before_seed_spaces_are_folded_into_one(
        client: TestClient, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    first, first_space = _before_seed_spaces(db, 2000, 5, epsilon=6)
    shifted, shifted_space = _before_seed_spaces(db, 2000, 5, epsilon=4,
                                                 shift="phq9_and_outcome")
    with monkeypatch.context() as before_this_code:  # a job admitted in its own space
        before_this_code.setattr(spaces, "check_keyed", lambda **_: None)
        assert _job(client, first, 3.5) == 202
    assert _job(client, shifted, 1.0) == 409  # its patients' spend is elsewhere: none

    assert patient_spaces.fold_legacy(database=db) == [first, shifted]
    seed_space = _space_of(db, first)
    assert _space_of(db, shifted) == seed_space not in (first_space, shifted_space)
    with db.session_scope() as session:
        space = session.get(PatientSpace, seed_space)
        assert space is not None and space.source_key == "synthetic:5"
        assert (space.budget_epsilon, space.budget_delta) == (4, 1e-5)  # the smallest
        assert session.scalar(select(Dataset.patient_overlap).where(Dataset.id == shifted))
    assert _live(db, seed_space) == {(first, shifted): 2000}
    assert _live(db, first_space) == {} and _live(db, shifted_space) == {}
    _verified(db, seed_space, first_space, shifted_space)
    filtered, _, read = _per_patient(db, seed_space)[(first, shifted)]
    assert read == 1 and 3.0 < filtered <= 4.0  # the job before the fold counts for them

    later = _generator(client, 2000, 5, shift="subgroup_effect", epsilon=4)
    assert _space_of(db, later) == seed_space
    assert _live(db, seed_space) == {(first, shifted, later): 2000}
    _verified(db, seed_space)
