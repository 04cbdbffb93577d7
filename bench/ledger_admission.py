"""How many epsilon-2 jobs a budget of epsilon 8 admits: naive summation vs the ledger.

Setting (issue 3): 8,000-row dataset (5,600 training rows), delta 1e-5, jobs with expected
batch 512 and 20 epochs, each submitted with target_epsilon 2 (the service picks the noise so
the job's own PRV epsilon is <= 2). Naive summation of the jobs' epsilons admits
floor(8 / 2) = 4; the ledger composes the entries' mechanisms with Rényi DP and admits more.
The ledger figure is measured by submitting jobs through the real service (a temporary SQLite
database) until it refuses one.

Run: .venv/bin/python bench/ledger_admission.py
"""

import math
import tempfile
import time
from pathlib import Path

from app.core.database import Database
from app.core.migrations import upgrade_head
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger.errors import BudgetExceeded
from app.privacy import accounting, noise

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


def main() -> None:
    n_train = round(0.7 * N_ROWS)
    q, steps_per_epoch = accounting.poisson_plan(n_train, BATCH)
    steps = EPOCHS * steps_per_epoch
    sigma = noise.noise_for_target(
        target_epsilon=JOB_EPSILON, delta=DELTA, sample_rate=q, steps=steps, accountant="prv"
    )
    job_prv = accounting.PRVAccountant().epsilon([accounting.Mechanism(sigma, q, steps)], DELTA)
    job_rdp = accounting.RDPAccountant().epsilon([accounting.Mechanism(sigma, q, steps)], DELTA)
    naive = math.floor(BUDGET / JOB_EPSILON)

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        admitted = admitted_by_ledger(f"sqlite:///{Path(tmp) / 'bench.db'}")
        elapsed = time.perf_counter() - started

    composed = accounting.RDPAccountant().epsilon(
        [accounting.Mechanism(sigma, q, steps)] * admitted, DELTA
    )
    print(
        f"job: sample rate {q:.4f}, steps {steps}, noise {sigma:.4f}, "
        f"epsilon PRV {job_prv:.4f} / RDP {job_rdp:.4f}"
    )
    print(f"naive summation admits      : {naive}")
    print(f"ledger (RDP filter) admits  : {admitted}  (composed RDP epsilon {composed:.4f})")
    print(f"ratio ledger / naive        : {admitted / naive:.2f}x")
    print(f"admission time per job      : {elapsed / (admitted + 1) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
