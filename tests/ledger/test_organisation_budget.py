"""The organisation's per-patient budget through the API: read by the tables'
holders and privacy officers, changed by admins only, never below what the most-spent patients
have spent or reserved, with delta at most 1/(10 n) of the largest upload, audited, and
hash-chained (an edited or deleted record shows)."""

import random
import threading
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.core.database import Database
from app.datasets.models import Dataset
from app.datasets.patients import patient_budget
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import block_spend, space_chain, spaces
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetBelowSpend, BudgetExceeded
from app.ledger.release import Scope
from app.ledger.schemas import PatientBudgetChange
from tests.api.scoring_helpers import problem
from tests.conftest import small_dataset
from tests.ledger.test_patient_budget import _decided, _job, _upload

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

ROUTE = "/v1/patient-budget"


def _audit(client: TestClient, action: str) -> list[dict[str, object]]:
    answer = client.get("/v1/audit-log", params={"action": action})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def test_readers_read_it_admins_change_it_and_the_change_is_audited_and_chained(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    steward, officer = client_as("data_steward"), client_as("privacy_officer")
    fresh = steward.get(ROUTE).json()
    assert fresh["epsilon"] == 8 and fresh["delta"] == 1e-6 and fresh["filter_order"] > 1
    assert fresh["spent_epsilon"] == 0 and fresh["remaining_epsilon"] == 8
    assert fresh["chain_records"] == 1  # migration 0020's first record
    withheld = {"spent_epsilon": None, "remaining_epsilon": None}
    read = officer.get(ROUTE).json()  # the spend depends on which tables share patients
    assert {**fresh, **withheld} == {**read, "withheld": None} and read["withheld"]
    assert client_as("data_scientist").get(ROUTE).status_code == 403
    assert steward.put(ROUTE, json={"epsilon": 9, "delta": 1e-6}).status_code == 403

    changed = client.put(ROUTE, json={"epsilon": 10, "delta": 1e-6})
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert body["epsilon"] == 10 and body["chain_records"] == 2
    assert body["chain_head_hash"] != fresh["chain_head_hash"]
    assert body["filter_order"] == fresh["filter_order"]  # fixed when the space was created
    assert steward.get(ROUTE).json() == body

    verified = officer.get(f"{ROUTE}/verify")
    assert verified.status_code == 200, verified.text
    assert verified.json() == {"valid": True, "budget_anchored": True, "records": 2,
                               "first_invalid": None, "head_hash": body["chain_head_hash"]}
    (event,) = _audit(officer, "patient_budget.changed")
    assert event["detail"]["from"] == {"epsilon": 8.0, "delta": 1e-6}  # type: ignore[index]
    assert event["detail"]["to"] == {"epsilon": 10.0, "delta": 1e-6}  # type: ignore[index]
    assert len(_audit(officer, "patient_budget.verified")) == 1


def test_a_budget_below_what_the_most_spent_patients_have_spent_is_refused(
    any_client: TestClient, any_db: Database,
) -> None:
    cohort = [f"p-{i}" for i in range(1000)]
    first = _upload(any_client, cohort, "first")
    assert _job(any_client, first, 3).status_code == 202
    second = _upload(any_client, cohort[:500] + [f"q-{i}" for i in range(500)], "second", seed=1)
    assert _job(any_client, second, 2).status_code == 202
    before = any_client.get(ROUTE).json()
    spent = before["spent_epsilon"]
    assert 3 < spent < 5, before  # the shared patients': 3 and 2 composed, less than 5
    with any_db.session_scope() as session:  # each block's spend is the filter's, entry by entry
        space = spaces.organisation(session=session)
        found = block_spend.spends(session=session, guard=space.guard,
                                   blocks=spaces.live_blocks(session=session, space_id=space.id))
        assert sorted(len(s.entries) for s in found) == [1, 1, 2]
        for each in found:
            assert each.epsilon == ledger_spend.filtered_epsilon(space.guard, each.entries)
        assert max(s.epsilon for s in found) == spent

    refused = problem(any_client.put(ROUTE, json={"epsilon": spent / 2, "delta": 1e-6}), 409,
                      field="epsilon", kind="budget-below-spend")
    assert refused["spent_epsilon"] == pytest.approx(spent)
    assert refused["requested"] == {"epsilon": spent / 2, "delta": 1e-6}
    assert any_client.get(ROUTE).json() == before  # nothing changed, nothing chained

    lowered = any_client.put(ROUTE, json={"epsilon": round(spent + 0.3, 2), "delta": 1e-6})
    assert lowered.status_code == 200, lowered.text
    # The shared patients have 0.3 left: a release on either table leaves them out ...
    over = _job(any_client, second, 3)
    assert over.status_code == 202, over.text
    with any_db.session_scope() as session:
        entry = ledger_service.entry_of(session=session, scope=Scope.job(over.json()["id"]))
        assert entry is not None and _decided(entry.left_out) == {
            "scope": [first, second], "patterns": [[first, second]]}
    assert any_client.get(ROUTE).json()["spent_epsilon"] == pytest.approx(spent)
    # ... while a cohort that shares nobody keeps the whole (lowered) budget.
    alone = _upload(any_client, [f"s-{i}" for i in range(1000)], "alone", seed=2)
    alone_job = _job(any_client, alone, 3)
    assert alone_job.status_code == 202
    with any_db.session_scope() as session:
        entry = ledger_service.entry_of(session=session, scope=Scope.job(alone_job.json()["id"]))
        assert entry is not None and _decided(entry.left_out) is None


def test_a_delta_above_one_tenth_over_the_largest_upload_is_a_422(client: TestClient) -> None:
    _upload(client, [f"d-{i}" for i in range(3000)], "large")
    before = client.get(ROUTE).json()
    problem(client.put(ROUTE, json={"epsilon": 8, "delta": 1e-4}), 422, field="delta",
            allowed="(0, 3.33333e-05]")
    problem(client.put(ROUTE, json={"epsilon": 0, "delta": 1e-6}), 422, field="epsilon")
    problem(client.put(ROUTE, json={"epsilon": 8}), 422, field="delta")
    assert client.get(ROUTE).json() == before
    assert client.put(ROUTE, json={"epsilon": 8, "delta": 2e-5}).status_code == 200


def test_an_edited_or_deleted_budget_record_breaks_the_chain(
    any_client: TestClient, any_db: Database
) -> None:
    for epsilon in (9, 10):
        assert any_client.put(ROUTE, json={"epsilon": epsilon, "delta": 1e-6}).status_code == 200
    with any_db.session_scope() as session:
        space = spaces.organisation(session=session)
        assert space_chain.verify(session=session, space=space).valid
        session.execute(text("UPDATE patient_space_event SET budget_epsilon = 50 "
                             "WHERE space_id = :s AND seq = 2"), {"s": space.id})
        edited = space_chain.verify(session=session, space=space)
        assert not edited.valid and edited.first_invalid is not None
        assert edited.first_invalid.seq == 2 and "edited" in edited.first_invalid.reason
        session.execute(text("UPDATE patient_space_event SET budget_epsilon = 9 "
                             "WHERE space_id = :s AND seq = 2"), {"s": space.id})
        assert space_chain.verify(session=session, space=space).valid
        session.execute(text("DELETE FROM patient_space_event WHERE space_id = :s AND seq = 3"),
                        {"s": space.id})
        truncated = space_chain.verify(session=session, space=space)
        assert not truncated.valid and "missing" in truncated.first_invalid.reason  # type: ignore[union-attr]
        assert not truncated.budget_anchored  # the space's budget (10) has no record now


def test_a_generators_own_space_chains_its_budget_with_the_dataset(
    client: TestClient, db: Database
) -> None:
    created = client.post("/v1/datasets", json=small_dataset())
    assert created.status_code == 201, created.text
    changed = client.put(f"/v1/datasets/{created.json()['id']}/privacy-budget",
                         json={"epsilon": 12, "delta": 1e-5})
    assert changed.status_code == 200, changed.text
    with db.session_scope() as session:
        dataset = session.get(Dataset, created.json()["id"])
        assert dataset is not None and dataset.patient_space_id is not None
        space = session.get(spaces.PatientSpace, dataset.patient_space_id)
        assert space is not None and space.budget_epsilon == 12
        verified = space_chain.verify(session=session, space=space)
        # budget, its own block (space_chain "blocks"), the new budget
        assert verified.valid and verified.budget_anchored and verified.records == 3
        # The organisation's delta rule reads only the organisation's own datasets.
        organisation = spaces.organisation(session=session)
        assert patient_budget.largest_upload(session=session, space_id=organisation.id) == 0


JOB = {"privacy": {"noise_multiplier": 4.0}, "training": {"epochs": 2, "batch_size": 256}}


@pytest.mark.parametrize("seed", range(2))
def test_the_organisation_budget_lowered_while_jobs_race_is_never_overspent(
    any_client: TestClient, any_db: Database, seed: int
) -> None:
    """Jobs on two overlapping tables and changes of the per-patient budget (down and up), all
    at once: the most-spent patients end within the budget in force, whatever the order."""
    rng = random.Random(seed)
    cohort = [f"r-{i}" for i in range(1000)]
    tables = [_upload(any_client, cohort, "north"),
              _upload(any_client, cohort[:700] + [f"t-{i}" for i in range(300)], "south", 1)]
    plan: list[tuple[str, float]] = [("job", float(rng.choice(tables))) for _ in range(8)]
    plan += [("budget", rng.choice([2.0, 3.0])), ("budget", rng.choice([4.0, 9.0]))]
    rng.shuffle(plan)
    outcomes: list[str] = []
    lock, start = threading.Lock(), threading.Barrier(len(plan))

    def run(kind: str, value: float) -> None:
        start.wait()
        try:
            with any_db.session_scope() as session:
                if kind == "budget":
                    patient_budget.change(session=session, budget=PatientBudgetChange(
                        epsilon=value, delta=1e-6))
                else:
                    training_flow.submit_training(session=session, request=JobCreate(
                        dataset_id=int(value), **JOB))  # type: ignore[arg-type]
            result = "admitted"
        except (BudgetExceeded, BudgetBelowSpend):
            result = "refused"
        with lock:
            outcomes.append(f"{kind} {result}")

    threads = [threading.Thread(target=run, args=step) for step in plan]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == len(plan), outcomes
    with any_db.session_scope() as session:
        final = patient_budget.view(session=session)
        space = spaces.organisation(session=session)
        assert space_chain.verify(session=session, space=space).valid
    assert final.spent_epsilon is not None
    assert final.spent_epsilon <= final.epsilon + 1e-9, (final, outcomes)
