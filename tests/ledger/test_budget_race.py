"""A budget lowered while jobs and statistics race for it is never overspent, and ``verify``
fails any chain that held more than the budget in force at some record (SQLite, PostgreSQL).

Before the fix, ``reserve`` admitted against the dataset row read *before* it took the lock:
a budget lowered from 8 to 3 while ten jobs of epsilon 2 raced it ended at 5.5-7.9 spent, and
``verify`` said valid.
"""

import random
import threading

import pytest
from sqlalchemy import select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate, PrivacyBudget
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import chain
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetBelowSpend, BudgetExceeded
from app.ledger.models import LedgerEvent
from app.statistics import service as statistics_service
from app.statistics.schemas import StatisticsCreate

N_ROWS, DELTA = 2000, 1e-5
JOB = {"privacy": {"noise_multiplier": 1.2}, "training": {"epochs": 2, "batch_size": 256}}
STATS = {"queries": [{"kind": "count", "by": ["sex"]}, {"kind": "mean", "feature": "phq9"}],
         "privacy": {"epsilon": 0.8}}


def _dataset(db: Database, epsilon: float) -> int:
    with db.session_scope() as session:
        dataset = dataset_service.create(session=session, request=DatasetCreate.model_validate(
            {"name": "race", "source": {"kind": "synthetic", "n_rows": N_ROWS},
             "privacy_budget": {"epsilon": epsilon, "delta": DELTA}}))
        return dataset.id


def _job(dataset_id: int) -> JobCreate:
    return JobCreate.model_validate({"dataset_id": dataset_id, **JOB})


def _change_budget(db: Database, dataset_id: int, epsilon: float) -> None:
    with db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        dataset_service.change_budget(session=session, dataset=dataset,
                                      budget=PrivacyBudget(epsilon=epsilon, delta=DELTA))


def _verified(db: Database, dataset_id: int) -> dict:
    with db.session_scope() as session:
        return chain.verify(session=session, dataset_id=dataset_id)


def test_a_job_admits_against_the_budget_under_the_lock_not_a_stale_read(
    any_db: Database,
) -> None:
    """Deterministic form of the race: the submitter read the dataset (budget 8), the budget
    fell to 0.2 and committed, then the submitter took the lock. It must see 0.2."""
    dataset_id = _dataset(any_db, 8.0)
    with any_db.session_scope() as session:
        stale = dataset_service.get(session=session, dataset_id=dataset_id)
        assert stale.budget_epsilon == 8.0
        _change_budget(any_db, dataset_id, 0.2)
        with pytest.raises(BudgetExceeded) as refused:
            training_flow.submit_training(session=session, request=_job(dataset_id))
        assert refused.value.extra["budget"]["epsilon"] == 0.2
    assert _verified(any_db, dataset_id)["valid"]


def test_a_statistics_release_admits_against_the_budget_under_the_lock(
    any_db: Database,
) -> None:
    dataset_id = _dataset(any_db, 8.0)
    with any_db.session_scope() as session:
        stale = dataset_service.get(session=session, dataset_id=dataset_id)
        _change_budget(any_db, dataset_id, 0.2)
        with pytest.raises(BudgetExceeded):
            statistics_service.release(session=session, dataset=stale,
                                       request=StatisticsCreate.model_validate(STATS))


def _race(db: Database, dataset_id: int, plan: list[tuple[str, float]]) -> list[str]:
    """Run ``plan`` (job / stats / budget with its new epsilon) all at once, one thread each."""
    outcomes: list[str] = []
    lock, start = threading.Lock(), threading.Barrier(len(plan))

    def run(kind: str, epsilon: float) -> None:
        start.wait()
        try:
            if kind == "budget":
                _change_budget(db, dataset_id, epsilon)
            else:
                with db.session_scope() as session:
                    if kind == "job":
                        training_flow.submit_training(session=session, request=_job(dataset_id))
                    else:
                        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
                        statistics_service.release(
                            session=session, dataset=dataset,
                            request=StatisticsCreate.model_validate(STATS))
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
    return outcomes


@pytest.mark.parametrize("seed", range(3))
def test_budget_changes_racing_jobs_and_statistics_never_overspend(
    any_db: Database, seed: int
) -> None:
    """Random mixes of jobs, statistics releases and budget changes (down and up), all at
    once: after every record of the chain, what was held fits the budget then in force."""
    rng = random.Random(seed)
    dataset_id = _dataset(any_db, 8.0)
    plan: list[tuple[str, float]] = [(rng.choice(["job", "stats"]), 0.0) for _ in range(10)]
    plan += [("budget", rng.choice([2.0, 3.0, 4.0])), ("budget", rng.choice([3.0, 6.0]))]
    rng.shuffle(plan)
    outcomes = _race(any_db, dataset_id, plan)
    assert len(outcomes) == len(plan)
    verified = _verified(any_db, dataset_id)
    assert verified["valid"], verified
    with any_db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        budget = dataset.budget_epsilon

        spent = ledger_spend.dataset_spend(session=session, dataset=dataset).composed_epsilon
    assert spent <= budget + 1e-9, (spent, budget, outcomes)


def test_verify_fails_a_chain_that_held_more_than_its_budget(any_db: Database) -> None:
    """A budget record written past the filter (as the stale-read bug did, in effect) shows."""
    dataset_id = _dataset(any_db, 8.0)
    with any_db.session_scope() as session:
        for _ in range(2):
            training_flow.submit_training(session=session, request=_job(dataset_id))
    assert _verified(any_db, dataset_id)["valid"]
    with any_db.session_scope() as session:  # lower the budget without the ledger's check
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        ledger_service.lock_dataset(session=session, dataset_id=dataset_id)
        dataset.budget_epsilon = 0.5
        session.flush()
        ledger_service.record_budget(session=session, dataset=dataset)
    verified = _verified(any_db, dataset_id)
    assert not verified["valid"]
    with any_db.session_scope() as session:
        last = session.scalars(select(LedgerEvent).where(LedgerEvent.dataset_id == dataset_id)
                               .order_by(LedgerEvent.seq.desc())).first()
        assert last is not None
        assert verified["first_invalid"]["seq"] == last.seq
    assert "over the budget" in verified["first_invalid"]["reason"]
