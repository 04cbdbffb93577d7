"""How many epsilon-2 jobs a budget of epsilon 8 admits: naive summation, the ledger's Rényi
filter, and the exact PLD composition of the same fixed jobs.

Setting: 8,000-row dataset (about 5,600 training rows), delta 1e-5, jobs with
expected batch 512 and 20 epochs, each submitted with target_epsilon 2 (the service picks the
noise so the job's own epsilon is <= 2). Naive summation of the jobs' epsilons admits
floor(8 / 2) = 4. The ledger is a Rényi filter at one fixed order chosen from the budget
(``app.privacy.filter``), a construction with a proof for adaptively chosen jobs. The exact PLD
composition of the same jobs *fixed in advance* (dp-accounting, no adaptivity) is the most any
sound filter could admit. The union bound over the whole grid of orders is printed too: the
cost of keeping ~150 orders soundly. The ledger figure is measured by submitting jobs through
the real service (a temporary SQLite database) until it refuses one.

Run: .venv/bin/python bench/ledger_admission.py
"""

import math
import tempfile
import time
from pathlib import Path

import dp_accounting
import numpy as np

from app.core.database import Database
from app.core.migrations import upgrade_head
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger.errors import BudgetExceeded
from app.privacy import accounting, noise
from app.privacy.filter import conversion, filter_order

BUDGET, DELTA, N_ROWS, BATCH, EPOCHS, JOB_EPSILON = 8.0, 1e-5, 8000, 512, 20, 2.0


def admitted_by_ledger(database_url: str) -> int:
    """Submit target-epsilon-2 jobs through the service until the ledger refuses one."""
    upgrade_head(database_url)
    db = Database(database_url)
    try:
        with db.session_scope() as session:
            dataset = dataset_service.create(
                session=session,
                request=DatasetCreate.model_validate(
                    {"name": "bench", "source": {"kind": "synthetic", "n_rows": N_ROWS},
                     "privacy_budget": {"epsilon": BUDGET, "delta": DELTA}}
                ),
            )
        request = JobCreate.model_validate(
            {"dataset_id": dataset.id, "privacy": {"target_epsilon": JOB_EPSILON, "delta": DELTA},
             "training": {"epochs": EPOCHS, "batch_size": BATCH}}
        )
        admitted = 0
        while True:
            try:
                with db.session_scope() as session:
                    training_flow.submit_training(session=session, request=request)
                admitted += 1
            except BudgetExceeded:
                return admitted
    finally:
        db.dispose()


def job_mechanism() -> tuple[accounting.Mechanism, float]:
    """The bench's job as the service plans it (about 70% of the rows train), and its delta."""
    q, steps_per_epoch = accounting.poisson_plan(round(0.7 * N_ROWS), BATCH)
    steps = EPOCHS * steps_per_epoch
    sigma = noise.noise_for_target(
        target_epsilon=JOB_EPSILON, delta=DELTA, sample_rate=q, steps=steps, accountant="prv"
    )
    return accounting.Mechanism(sigma, q, steps), DELTA


def pld_epsilon(mechanism: accounting.Mechanism, jobs: int, delta: float) -> float:
    """dp-accounting's PLD epsilon of ``jobs`` copies of ``mechanism`` fixed in advance."""
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        mechanism.sample_rate, dp_accounting.GaussianDpEvent(mechanism.noise_multiplier)),
        mechanism.steps * jobs))
    return float(pld.get_epsilon(delta))


def pld_ceiling(mechanism: accounting.Mechanism, delta: float, budget: float) -> int:
    """The most copies whose exact PLD composition stays within ``budget``."""
    jobs = 0
    while pld_epsilon(mechanism, jobs + 1, delta) <= budget:
        jobs += 1
    return jobs


def union_bound_count(mechanism: accounting.Mechanism, delta: float, budget: float) -> int:
    """Jobs admitted by a filter over every grid order with delta split by a union bound."""
    curve = accounting.rdp_curve([mechanism])
    orders = accounting.ORDERS
    bounds = budget - np.array([conversion(a, delta / len(orders)) for a in orders])
    jobs = 0
    while np.any((jobs + 1) * curve <= bounds):
        jobs += 1
    return jobs


def main() -> None:
    mechanism, delta = job_mechanism()
    job_prv = accounting.PRVAccountant().epsilon([mechanism], delta)
    job_rdp = accounting.RDPAccountant().epsilon([mechanism], delta)
    naive = math.floor(BUDGET / JOB_EPSILON)

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        admitted = admitted_by_ledger(f"sqlite:///{Path(tmp) / 'bench.db'}")
        elapsed = time.perf_counter() - started

    order = filter_order(BUDGET, delta)
    at_order = accounting.rdp_curve([mechanism] * admitted)[list(accounting.ORDERS).index(order)]
    ceiling = pld_ceiling(mechanism, delta, BUDGET)
    print(
        f"job: sample rate {mechanism.sample_rate:.4f}, steps {mechanism.steps}, noise "
        f"{mechanism.noise_multiplier:.4f}, epsilon PLD {job_prv:.4f} / RDP {job_rdp:.4f}"
    )
    print(f"naive summation admits                 : {naive}")
    print(f"union bound over all {len(accounting.ORDERS)} orders admits  : "
          f"{union_bound_count(mechanism, delta, BUDGET)}")
    print(f"ledger (Renyi filter, order {order:g}) admits : {admitted}  (spend at its order "
          f"{at_order + conversion(order, delta):.4f})")
    print(f"exact PLD of the same fixed jobs admits: {ceiling}  (the most any sound filter "
          f"could; {admitted} jobs compose to {pld_epsilon(mechanism, admitted, delta):.4f})")
    print(f"ratio ledger / naive                   : {admitted / naive:.2f}x")
    print(f"ratio ledger / exact ceiling           : {admitted / ceiling:.2f}")
    print(f"admission time per job                 : {elapsed / (admitted + 1) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
