"""Statistics share the jobs' admission: the same filter, the same 409 with what is left, and no
overspend when statistics releases and training jobs race for one budget (SQLite, PostgreSQL)."""

import math
import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import chain
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetExceeded
from app.ledger.models import LedgerEntry
from app.privacy import accounting
from app.privacy.filter import conversion, filter_order, rdp_at
from app.statistics import service as statistics_service
from app.statistics.schemas import StatisticsCreate
from tests.conftest import small_dataset
from tests.statistics.helpers import EXAMPLE, ask, report

N_ROWS, BATCH, EPOCHS, SIGMA, DELTA = 2000, 256, 3, 2.0, 1e-5
K = 5
QUERIES = [{"kind": "count", "by": ["sex"]}, {"kind": "mean", "feature": "phq9"}]


def test_a_release_over_budget_is_a_409_with_what_is_left(any_client: TestClient) -> None:
    dataset = any_client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": 1.0, "delta": 1e-5})).json()
    first = ask(any_client, dataset["id"], {**EXAMPLE, "privacy": {"epsilon": 0.6}})
    assert first.status_code == 201, first.text
    # Gaussian releases compose sub-additively (two of 0.6 cost about 0.85); 0.9 does not fit.
    refused = ask(any_client, dataset["id"], {**EXAMPLE, "privacy": {"epsilon": 0.9}})
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"].endswith("/budget-exceeded")
    assert problem["budget"] == {"epsilon": 1.0, "delta": 1e-5}
    assert problem["remaining_epsilon"] == pytest.approx(0.4)  # the first release: its own 0.6
    assert problem["composed_epsilon_with_release"] > 1.0
    assert problem["filter"]["kind"] == "renyi" and problem["accountant"] == "rdp"
    largest = problem["largest_fitting_target_epsilon"]
    assert 0 < largest < 0.9
    assert len(report(any_client, dataset["id"])["entries"]) == 1  # nothing charged
    fitting = ask(any_client, dataset["id"], {**EXAMPLE, "privacy": {"epsilon": largest}})
    assert fitting.status_code == 201, fitting.text
    ledger = report(any_client, dataset["id"])
    assert ledger["spent"]["epsilon"] <= 1.0 and len(ledger["entries"]) == 2


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_a_first_release_may_take_the_whole_budget(client: TestClient, mechanism: str) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": 0.5, "delta": 1e-5})).json()
    whole = ask(client, dataset["id"], {**EXAMPLE, "privacy": {"epsilon": 0.5,
                                                               "mechanism": mechanism}})
    assert whole.status_code == 201, whole.text
    ledger = report(client, dataset["id"])
    # Laplace: the tighter of its pure epsilon and its RDP conversion is the spend.
    assert ledger["spent"]["epsilon"] <= 0.5 and ledger["remaining"]["epsilon"] < 1e-2
    more = ask(client, dataset["id"], {**EXAMPLE, "privacy": {"epsilon": 0.01,
                                                              "mechanism": mechanism}})
    assert more.status_code == 409
    assert more.json()["largest_fitting_target_epsilon"] is None


def _job_rdp(order: float) -> float:
    q = 1 / math.ceil(0.7 * N_ROWS / BATCH)  # about the training part's size
    return rdp_at([accounting.Mechanism(SIGMA, q, EPOCHS * int(1 / q))], order)


def _budget_admitting_exactly(k: int) -> tuple[float, float]:
    """A budget whose filter admits k mechanisms of the job's RDP at its order, with room to
    spare either side; and that RDP."""
    budget = 10.0
    for _ in range(20):  # the order depends on the budget: iterate to a fixed point
        order = filter_order(budget, DELTA)
        budget = conversion(order, DELTA) + (k + 0.5) * _job_rdp(order)
    return budget, _job_rdp(filter_order(budget, DELTA))


def _statistics_epsilon(rdp: float, order: float) -> float:
    """The Gaussian release target whose RDP at ``order`` is ``rdp`` (alpha mu^2 / 2)."""
    mu = math.sqrt(2 * rdp / order)
    return accounting.gaussian_epsilon([accounting.Mechanism(1 / mu, 1.0, 1)], DELTA)


def _race(db: Database, dataset_id: int, job: JobCreate, stats: StatisticsCreate) -> list[str]:
    outcomes: list[str] = []
    lock, start = threading.Lock(), threading.Barrier(20)

    def submit(kind: str) -> None:
        start.wait()
        try:
            with db.session_scope() as session:
                if kind == "job":
                    training_flow.submit_training(session=session, request=job)
                else:
                    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
                    statistics_service.release(session=session, dataset=dataset, request=stats)
            result = f"{kind} admitted"
        except BudgetExceeded:
            result = f"{kind} refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=submit, args=(kind,)) for kind in ["job", "stats"] * 10]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_statistics_and_jobs_racing_never_exceed_the_budget(any_db: Database) -> None:
    budget, rdp = _budget_admitting_exactly(K)
    order = filter_order(budget, DELTA)
    with any_db.session_scope() as session:
        dataset = dataset_service.create(session=session, request=DatasetCreate.model_validate(
            {"name": "race", "source": {"kind": "synthetic", "n_rows": N_ROWS},
             "privacy_budget": {"epsilon": budget, "delta": DELTA}}))
    job = JobCreate.model_validate({"dataset_id": dataset.id,
                                    "privacy": {"noise_multiplier": SIGMA},
                                    "training": {"epochs": EPOCHS, "batch_size": BATCH}})
    stats = StatisticsCreate.model_validate(
        {"queries": QUERIES, "privacy": {"epsilon": _statistics_epsilon(rdp, order)}})
    outcomes = _race(any_db, dataset.id, job, stats)
    admitted = [o for o in outcomes if o.endswith("admitted")]
    assert len(admitted) == K, outcomes
    with any_db.session_scope() as session:
        entries = list(session.scalars(select(LedgerEntry).where(
            LedgerEntry.dataset_id == dataset.id)))
        assert len(entries) == K
        spent = ledger_spend.dataset_spend(
            session=session, dataset=dataset_service.get(session=session, dataset_id=dataset.id))
        assert spent.composed_epsilon <= budget
        assert chain.verify(session=session, dataset_id=dataset.id)["valid"]
        releases = statistics_service.list_for_dataset(session=session, dataset_id=dataset.id)
        assert len(releases) == sum(o == "stats admitted" for o in outcomes)


def test_erased_rows_refuse_a_release(client: TestClient) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset()).json()
    assert ask(client, dataset["id"], EXAMPLE).status_code == 201
    assert client.delete(f"/v1/datasets/{dataset['id']}/data").status_code == 200
    refused = ask(client, dataset["id"], EXAMPLE)
    assert refused.status_code == 409 and refused.json()["state"] == "erased"
    assert len(report(client, dataset["id"])["statistics_releases"]) == 1
