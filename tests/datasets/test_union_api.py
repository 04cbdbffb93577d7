"""A declared union of cohorts through the API: its rows are its members' (each patient once,
the last member's row, in the part that member gave it), every release on it charges every
patient of every member, its members' later releases see that spend, and erasing a member
erases the union's rows."""

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.core.database import Database
from app.datasets import parts, union
from app.datasets.intake.stored import load_table
from app.datasets.models import Dataset
from app.datasets.patients import identity
from app.ledger import left_out
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.ledger.spaces import PatientBlock, PatientSpace
from tests.api.scoring_helpers import problem
from tests.ledger.test_patient_budget import BUDGET, SCHEMA, _job, _upload

OTHER_SCHEMA = {**SCHEMA, "features": SCHEMA["features"][:1]}


def _union(client: TestClient, members: list[int], **extra: Any) -> Any:
    return client.post("/v1/datasets", json={
        "name": "cohorts together", "source": {"kind": "union", "datasets": members},
        "privacy_budget": BUDGET, **extra})


def test_a_union_charges_every_patient_of_its_members(any_client: TestClient,
                                                      any_db: Database) -> None:
    first = _upload(any_client, [f"p-{i}" for i in range(3000)], "cohort 2025")
    later = _upload(any_client, [f"p-{i}" for i in range(2000, 4000)], "follow-up 2026", seed=1)
    apart = _upload(any_client, [f"q-{i}" for i in range(3000)], "another clinic", seed=2)
    created = _union(any_client, [first, later])
    assert created.status_code == 201, created.text
    body = created.json()
    joined = int(body["id"])
    # Its public size is its members' summed: the exact 4,000 would give away their overlap.
    assert body["source"] == {"kind": "union", "n_rows": 5000, "seed": None,
                              "datasets": [first, later]}
    assert body["state"] == "ready" and body["rows"] == 5000
    assert body["patients"] == {"patients": 4000, "already_known": 4000, "new": 0,
                                "shared_with": {str(first): 3000, str(later): 2000}}
    assert body["schema_hash"] == any_client.get(f"/v1/datasets/{first}").json()["schema_hash"]

    with any_db.session_scope() as session:
        live = {tuple(b.datasets): b.size for b in session.scalars(
            select(PatientBlock).where(PatientBlock.closed_at.is_(None)))}
    assert live[(first, joined)] == 2000 and live[(first, later, joined)] == 1000
    assert live[(later, joined)] == 1000 and live[(apart,)] == 3000

    assert _job(any_client, joined, 6).status_code == 202
    # Every member's patients carry that spend (a member's release leaves them all out); the
    # other clinic's do not.
    for member in (first, later):
        admitted = _job(any_client, member, 6)
        assert admitted.status_code == 202, admitted.text
        with any_db.session_scope() as session:
            entry = ledger_service.entry_of(session=session, scope=Scope.job(admitted.json()["id"]))
            assert entry is not None
            found = left_out.of(entry)
        assert found is not None and all(found.leaves_out(p) for p in live if member in p)
    apart_job = _job(any_client, apart, 7.9)
    assert apart_job.status_code == 202
    with any_db.session_scope() as session:
        entry = ledger_service.entry_of(session=session, scope=Scope.job(apart_job.json()["id"]))
        assert entry is not None and left_out.of(entry) is None
    verified = any_client.get("/v1/patient-budget/verify")
    assert verified.status_code == 200 and verified.json()["valid"], verified.text


def test_a_union_keeps_the_last_members_row_in_that_members_part(client: TestClient,
                                                                 db: Database) -> None:
    first = _upload(client, [f"p-{i}" for i in range(1500)], "cohort 2025")
    later = _upload(client, [f"p-{i}" for i in range(1000, 2500)], "follow-up 2026", seed=7)
    joined = int(_union(client, [first, later]).json()["id"])
    with db.session_scope() as session:
        dataset = session.get(Dataset, joined)
        member_rows = {d: load_table(session.get(Dataset, d)) for d in (first, later)}
        secrets = {d: session.get(Dataset, d).record_secret for d in (first, later)}
        table, where = union.load_with_parts(dataset)
        split = parts.load_parts(dataset)
        members = [session.get(Dataset, d) for d in (first, later)]
        counts = (dataset.n_train, dataset.n_calibration, dataset.n_evaluation)
        summed = tuple(sum(n) for n in zip(*((m.n_train, m.n_calibration, m.n_evaluation)
                                              for m in members), strict=True))
    ids = table.ids.to_pylist()
    assert len(ids) == len(set(ids)) == 2500
    by_id = {}
    for member in (first, later):  # later rows overwrite: the last member's row is kept
        rows = member_rows[member]
        member_parts = identity.parts_of(rows.ids, secrets[member], scheme=identity.CURRENT_SCHEME)
        for i, patient in enumerate(rows.ids.to_pylist()):
            by_id[patient] = (rows.features[i].tolist(), rows.outcome[i], member_parts[i])
    for i, patient in enumerate(ids):
        features, outcome, part = by_id[patient]
        assert table.features[i].tolist() == features and table.outcome[i] == outcome
        assert where[i] == part
    read = (len(split.train.y), len(split.calibration.y), len(split.evaluation.y))
    assert read == tuple(int(np.sum(where == p)) for p in identity.Part)
    # the public sizes are the members' summed, never the overlap's
    assert counts == summed == (split.train.rows, split.calibration.rows, split.evaluation.rows)


def test_refusals_name_the_field_and_keep_nothing(client: TestClient) -> None:
    first = _upload(client, [f"p-{i}" for i in range(1500)], "cohort 2025")
    later = _upload(client, [f"p-{i}" for i in range(1000, 2500)], "follow-up 2026", seed=7)
    other = client.post("/v1/datasets", json={"name": "other schema", "source": {
        "kind": "upload"}, "schema": OTHER_SCHEMA, "privacy_budget": BUDGET}).json()["id"]
    generated = client.post("/v1/datasets", json={
        "name": "generator", "source": {"kind": "synthetic", "n_rows": 2000},
        "privacy_budget": BUDGET}).json()["id"]
    before = client.get("/v1/datasets").json()["total"]
    for members in ([first], [first, first], [first, 999999], [first, other],
                    [first, generated], [first, later] * 9):
        problem(_union(client, members), 422, field="source.datasets")
    problem(_union(client, [first, later], schema=SCHEMA), 422, field="schema")
    problem(_union(client, [first, later], privacy_budget={"epsilon": 8, "delta": 1e-4}),
            422, field="privacy_budget.delta")
    problem(client.post("/v1/datasets", json={
        "name": "x", "source": {"kind": "union", "datasets": [first, later]}, "public": True}),
        422, field="public")
    assert client.get("/v1/datasets").json()["total"] == before


def test_the_organisations_delta_bounds_a_union_as_an_upload(client: TestClient,
                                                            db: Database) -> None:
    first = _upload(client, [f"p-{i}" for i in range(1500)], "cohort 2025")
    later = _upload(client, [f"q-{i}" for i in range(1500)], "another cohort", seed=7)
    with db.session_scope() as session:  # 1/(10 * 3000) < 4e-5 <= 1/(10 * 1500)
        session.execute(update(PatientSpace).where(PatientSpace.kind == "organisation")
                        .values(budget_delta=4e-5))
    problem(_union(client, [first, later]), 422, field="the organisation's per-patient delta")


def test_erasing_a_member_erases_the_unions_rows(client: TestClient) -> None:
    first = _upload(client, [f"p-{i}" for i in range(1500)], "cohort 2025")
    later = _upload(client, [f"p-{i}" for i in range(1000, 2500)], "follow-up 2026", seed=7)
    joined = int(_union(client, [first, later]).json()["id"])
    assert client.delete(f"/v1/datasets/{later}/data").status_code in (200, 204)
    found = client.get(f"/v1/datasets/{joined}").json()
    assert found["state"] == "erased" and found["data_erased_at"] is not None
    assert _job(client, joined, 1).status_code == 409
    assert _job(client, first, 1).status_code == 202  # the other member keeps its rows
    problem(_union(client, [first, later]), 422, field="source.datasets")


@pytest.mark.slow
def test_retrain_on_a_union_holding_the_follow_up(client: TestClient, run_worker: Any) -> None:
    first = _upload(client, [f"p-{i}" for i in range(3000)], "cohort 2025")
    job = client.post("/v1/jobs", json={"dataset_id": first,
                                        "privacy": {"target_epsilon": 2.0}})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    model = client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    follow = client.post("/v1/datasets", json={
        "name": "follow-up", "source": {"kind": "upload"}, "privacy_budget": BUDGET,
        "follow_up": {"model_id": model, "period_start": "2026-01-01",
                      "period_end": "2026-06-30"}}).json()["id"]
    from tests.ledger.test_patient_budget import _table
    sent = client.put(f"/v1/datasets/{follow}/data", headers={"Content-Type": "text/csv"},
                      content=_table([f"p-{i}" for i in range(2000, 5000)], 3))
    assert sent.status_code == 200, sent.text
    run = client.post(f"/v1/models/{model}/monitoring-runs",
                      json={"dataset_id": follow, "privacy": {"target_epsilon": 1.0}})
    assert run.status_code == 202, run.text
    assert run_worker() == 1
    joined = int(_union(client, [first, follow]).json()["id"])
    path = f"/v1/monitoring-runs/{run.json()['id']}/retrain"
    problem(client.post(path, json={"dataset_id": first}), 422, field="dataset_id")
    problem(client.post(path, json={"dataset_id": 999999}), 422, field="dataset_id")
    retrain = client.post(path, json={"dataset_id": joined})
    assert retrain.status_code == 202, retrain.text
    assert retrain.json()["dataset_id"] == joined
    assert run_worker() == 1
    done = client.get(f"/v1/jobs/{retrain.json()['id']}").json()
    assert done["status"] == "succeeded", done
    entries = client.get(f"/v1/datasets/{joined}/privacy-report").json()["entries"]
    assert len(entries) == 1 and entries[0]["job_id"] == retrain.json()["id"]
    card = client.get(f"/v1/jobs/{retrain.json()['id']}/privacy-report").json()["model_card"]
    assert f"datasets {first}, {follow}" in card["training_data"]["source"], card
