"""No overspend under concurrency: 50 simultaneous submissions, a budget that admits exactly k."""

import math
import threading

from sqlalchemy import select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger.errors import BudgetExceeded
from app.ledger.models import LedgerEntry
from app.privacy import accounting

N_ROWS, BATCH, EPOCHS, SIGMA, DELTA = 2000, 256, 3, 2.0, 1e-5
K = 5


def _budget_admitting_exactly(k: int) -> float:
    q = 1 / math.ceil(0.7 * N_ROWS / BATCH)
    steps = EPOCHS * int(1 / q)
    rdp = accounting.RDPAccountant()
    eps_k = rdp.epsilon([accounting.Mechanism(SIGMA, q, steps)] * k, DELTA)
    eps_next = rdp.epsilon([accounting.Mechanism(SIGMA, q, steps)] * (k + 1), DELTA)
    return (eps_k + eps_next) / 2


def test_fifty_concurrent_submissions_admit_exactly_k(any_db: Database) -> None:
    budget = _budget_admitting_exactly(K)
    with any_db.session_scope() as session:
        dataset = dataset_service.create(
            session=session,
            request=DatasetCreate.model_validate(
                {"name": "race", "source": {"kind": "synthetic", "n_rows": N_ROWS},
                 "privacy_budget": {"epsilon": budget, "delta": DELTA}}
            ),
        )
    request = JobCreate.model_validate(
        {"dataset_id": dataset.id, "privacy": {"noise_multiplier": SIGMA},
         "training": {"epochs": EPOCHS, "batch_size": BATCH}}
    )
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def submit() -> None:
        start.wait()
        try:
            with any_db.session_scope() as session:
                training_flow.submit_training(session=session, request=request)
            result = "admitted"
        except BudgetExceeded:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=submit) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("admitted") == K, outcomes
    assert outcomes.count("refused") == 50 - K
    with any_db.session_scope() as session:
        entries = session.scalars(
            select(LedgerEntry).where(LedgerEntry.dataset_id == dataset.id)
        ).all()
        spent = dataset_service.get(session=session, dataset_id=dataset.id)
        assert len(entries) == K
        # One ledger write for the budget record at registration, then one per admission.
        assert spent.ledger_version == K + 1
