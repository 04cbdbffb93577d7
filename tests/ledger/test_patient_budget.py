"""The budget belongs to the patient: uploads of overlapping cohorts share their patients'
spend; a disjoint cohort does not (issue 29's walk-through, through the API)."""

from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import Database
from app.datasets import identity
from app.datasets.models import AWAITING_DATA, Dataset
from app.ledger import spaces
from app.ledger.spaces import PatientBlock

SCHEMA = {
    "features": [{"name": "score", "label": "Score", "kind": "integer", "lower": 0,
                  "upper": 20, "reference": 5},
                 {"name": "flag", "label": "Flag", "kind": "binary", "reference": 0}],
    "outcome": {"name": "event", "label": "Event within a year",
                "bands": {"low_medium": 0.1, "medium_high": 0.3}},
    "id_column": "patient_id",
}
BUDGET = {"epsilon": 8, "delta": 1e-6}


def _table(ids: list[str], seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 21, len(ids))
    flag = rng.integers(0, 2, len(ids))
    event = rng.random(len(ids)) < 1 / (1 + np.exp(2.5 - 0.15 * score - 0.8 * flag))
    lines = ["patient_id,score,flag,event"] + [
        f"{i},{s},{f},{int(e)}" for i, s, f, e in zip(ids, score, flag, event, strict=True)]
    return ("\n".join(lines) + "\n").encode()


def _upload(client: TestClient, ids: list[str], name: str, seed: int = 0) -> int:
    created = client.post("/v1/datasets", json={
        "name": name, "source": {"kind": "upload"}, "schema": SCHEMA, "privacy_budget": BUDGET})
    assert created.status_code == 201, created.text
    dataset_id = int(created.json()["id"])
    sent = client.put(f"/v1/datasets/{dataset_id}/data", content=_table(ids, seed),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text
    return dataset_id


def _job(client: TestClient, dataset_id: int, epsilon: float) -> Any:
    return client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                         "privacy": {"target_epsilon": epsilon},
                                         "training": {"epochs": 2, "batch_size": 256}})


def test_a_re_export_shares_its_patients_spend_and_a_disjoint_cohort_does_not(
        any_client: TestClient, any_db: Database) -> None:
    cohort = [f"n-{i}" for i in range(3000)]
    first = _upload(any_client, cohort, "north-march")
    assert _job(any_client, first, 3).status_code == 202
    # The monthly re-export: the same patients minus one, plus ten new ones.
    re_export = cohort[1:] + [f"new-{i}" for i in range(10)]
    second = _upload(any_client, re_export, "north-april", seed=1)
    refused = _job(any_client, second, 6)
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["budget_scope"] == "patients", body
    largest = body["largest_fitting_target_epsilon"]
    # 5.46 here: Gaussian-like releases compose by RDP to less than the sum of their epsilons
    assert 4.0 < largest < 6.0, body
    assert _job(any_client, second, largest).status_code == 202
    # A disjoint cohort is nobody's re-export: it keeps the whole per-patient budget.
    other = _upload(any_client, [f"s-{i}" for i in range(3000)], "south", seed=2)
    assert _job(any_client, other, 7.9).status_code == 202

    with any_db.session_scope() as session:
        live = {tuple(b.datasets): b.size for b in session.scalars(
            select(PatientBlock).where(PatientBlock.closed_at.is_(None)))
            if len(b.datasets) and b.datasets[0] in (first, second, other)}
    assert live == {(first,): 1, (first, second): 2999, (second,): 10, (other,): 3000}


def test_a_private_upload_without_ids_is_refused(client: TestClient) -> None:
    created = client.post("/v1/datasets", json={
        "name": "no-ids", "source": {"kind": "upload"},
        "schema": {**SCHEMA, "id_column": None}, "privacy_budget": BUDGET})
    assert created.status_code == 422, created.text
    (error,) = created.json()["errors"]
    assert error["field"] == "schema.id_column" and "patient" in error["message"]


def test_an_upload_registered_before_spaces_is_its_own_block(client: TestClient,
                                                             db: Database) -> None:
    """Migration 0019 gives a budgeted dataset of that time a space of its own; one still
    awaiting its rows then has no organisation key: its rows arrive as one block of its own."""
    legacy = {**SCHEMA, "id_column": None}
    with db.session_scope() as session:  # as migration 0019 leaves such a registration
        space = spaces.new_space(session=session, kind=spaces.SpaceKind.DATASET, epsilon=8,
                                 delta=1e-6)
        dataset = Dataset(name="before-spaces", source_kind="upload", n_rows=0, n_train=0,
                          seed=0, schema_json=legacy, schema_hash="0" * 64,
                          state=AWAITING_DATA, ledger_version=0, budget_epsilon=8,
                          budget_delta=1e-6, filter_order=space.filter_order,
                          patient_space_id=space.id, coin_scheme=identity.CURRENT_SCHEME)
        session.add(dataset)
        session.flush()
        dataset_id, space_id = dataset.id, space.id
    rows = _table([str(i) for i in range(500)]).decode().splitlines()
    body = "\n".join([rows[0].split(",", 1)[1], *(r.split(",", 1)[1] for r in rows[1:])])
    sent = client.put(f"/v1/datasets/{dataset_id}/data", content=(body + "\n").encode(),
                      headers={"Content-Type": "text/csv"})
    assert sent.status_code == 200, sent.text
    with db.session_scope() as session:
        (block,) = spaces.live_blocks(session=session, space_id=space_id)
        assert (block.datasets, block.size) == ([dataset_id], 500)
    assert _job(client, dataset_id, 3).status_code == 202
