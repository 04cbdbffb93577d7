"""The budget belongs to the patient: uploads of overlapping cohorts share their patients'
spend; a disjoint cohort does not (a walk-through, through the API)."""

from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import Database
from app.ledger import block_spend, spaces
from app.ledger.models import LedgerEntry
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


def _decided(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """An entry's left-out record without its salt; None where nobody was left out."""
    if not stored or not stored["patterns"]:
        return None
    return {"scope": stored["scope"], "patterns": stored["patterns"]}


def _left_out(db: Database, job_id: int) -> dict[str, Any] | None:
    with db.session_scope() as session:
        entry = session.scalars(select(LedgerEntry).where(LedgerEntry.job_id == job_id)).one()
        return _decided(entry.left_out)


def test_a_re_export_shares_its_patients_spend_and_a_disjoint_cohort_does_not(
        any_client: TestClient, any_db: Database) -> None:
    cohort = [f"n-{i}" for i in range(3000)]
    first = _upload(any_client, cohort, "north-march")
    assert _job(any_client, first, 3).status_code == 202
    # The monthly re-export: the same patients minus one, plus ten new ones.
    re_export = cohort[1:] + [f"new-{i}" for i in range(10)]
    second = _upload(any_client, re_export, "north-april", seed=1)
    # 3 and 6 compose past the per-patient 8: the release is admitted by the dataset's own
    # budget, and the 2,999 shared patients are left out of it; the ten new ones are read.
    admitted = _job(any_client, second, 6)
    assert admitted.status_code == 202, admitted.text
    assert _left_out(any_db, admitted.json()["id"]) == {
        "scope": [first, second], "patterns": [[first, second]]}
    # A disjoint cohort is nobody's re-export: it keeps the whole per-patient budget.
    other = _upload(any_client, [f"s-{i}" for i in range(3000)], "south", seed=2)
    alone = _job(any_client, other, 7.9)
    assert alone.status_code == 202 and _left_out(any_db, alone.json()["id"]) is None
    with any_db.session_scope() as session:  # the shared patients paid for the first job only
        space = spaces.organisation(session=session)
        spent = {tuple(s.block.datasets): [e.job_id for e in s.entries]
                 for s in block_spend.spends(session=session, guard=space.guard,
                                             blocks=spaces.live_blocks(session=session,
                                                                       space_id=space.id))}
    assert spent[(first, second)] == [1]
    assert spent[(second,)] == [admitted.json()["id"]]

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
