"""Worst cost of planning a job over a grid of extreme but legal requests.

Planning (defaults, Poisson plan, delta, the noise for a target epsilon, and the epsilons the
ledger records) runs inside ``POST /v1/jobs``: one legal request must not take the API down.
Goal: every admissible request plans in at most 2 s and 500 MB; the rest is a 422.

Each grid point plans a job the way the service does (``jobs.service.plan`` and the ledger's
two accountants) with the accountants' caches cleared, timed with ``time.perf_counter``, then
again from cold caches for its peak allocation measured by ``tracemalloc`` (NumPy reports its
arrays to it; timing under tracemalloc would count its own overhead). The baseline, measured
in the same run, is the README's default job (8,000 rows, target epsilon 3).

Run: .venv/bin/python bench/planning_cost.py [--quick]
"""

import argparse
import itertools
import time
import tracemalloc

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.jobs import service as job_service
from app.jobs.schemas import JobCreate
from app.privacy import accounting

GOAL_SECONDS, GOAL_MB = 2.0, 500.0


def _dataset(n_rows: int, delta: float) -> Dataset:
    return Dataset(id=1, n_rows=n_rows, n_train=int(n_rows * 0.7),
                   n_calibration=int(n_rows * 0.15), budget_delta=delta, public=False)


def _plan(n_rows: int, delta: float, training: dict, epsilon: float) -> str:
    """Plan one request the way the service does, from cold caches; the outcome in words."""
    accounting.clear_caches()
    request = JobCreate.model_validate(
        {"dataset_id": 1, "privacy": {"target_epsilon": epsilon}, "training": training}
    )
    try:
        job = job_service.plan(dataset=_dataset(n_rows, delta), request=request)
        history = [job_service.mechanism_of(job)]
        for name in accounting.ACCOUNTANTS:
            accounting.create_accountant(name).epsilon(history, job.delta)
        return f"sigma {job.noise_multiplier:.3g}, {job.steps} steps"
    except InvalidRequest as exc:
        return f"422 {exc.field}"


def plan_cost(
    n_rows: int, delta: float, training: dict, epsilon: float
) -> tuple[float, float, str]:
    """(seconds, peak MB, outcome) of planning one request from cold caches.

    Timed without tracemalloc (it hooks every Python allocation: Opacus' pure-Python RDP
    series runs ~10x slower under it), then planned again from cold caches under tracemalloc
    for the peak memory.
    """
    start = time.perf_counter()
    outcome = _plan(n_rows, delta, training, epsilon)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    _plan(n_rows, delta, training, epsilon)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20, outcome


def grid(quick: bool) -> list[tuple[int, float, dict, float]]:
    rows = [8_000, 2_000_000] if quick else [1_000, 8_000, 200_000, 2_000_000]
    batches = [8, None] if quick else [8, 64, 1024, None]
    epochs = [1, 1000] if quick else [1, 20, 200, 1000]
    targets = [0.1, 100.0] if quick else [0.1, 1.0, 10.0, 100.0]
    deltas = [5e-8] if quick else [1e-5, 5e-8, 1e-10]
    points = []
    for n, b, e, t, d in itertools.product(rows, batches, epochs, targets, deltas):
        if d > 1 / (10 * n):  # the service caps delta at 1/(10 n)
            continue
        training = {"epochs": e, "model": "mlp", "hidden_units": 256}
        if b is not None:
            training["batch_size"] = b
        points.append((n, d, training, t))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    args = parser.parse_args()
    base_s, base_mb, _ = plan_cost(8_000, 1e-5, {}, 3.0)
    worst_s = worst_mb = 0.0
    worst_s_case = worst_mb_case = ""
    points = grid(args.quick)
    for n, d, training, t in points:
        s, mb, outcome = plan_cost(n, d, training, t)
        case = f"n={n} delta={d:g} {training} eps={t:g}: {outcome}"
        if s > worst_s:
            worst_s, worst_s_case = s, case
        if mb > worst_mb:
            worst_mb, worst_mb_case = mb, case
    print(f"baseline (README default job): {base_s:.3f} s, {base_mb:.1f} MB")
    print(f"grid: {len(points)} requests")
    verdict = "PASS" if worst_s <= GOAL_SECONDS else "FAIL"
    print(f"worst time:   {worst_s:.3f} s ({worst_s / base_s:.1f}x baseline; "
          f"goal {GOAL_SECONDS} s: {verdict})  {worst_s_case}")
    print(f"worst memory: {worst_mb:.1f} MB ({worst_mb / max(base_mb, 1e-9):.1f}x baseline; goal "
          f"{GOAL_MB:g} MB: {'PASS' if worst_mb <= GOAL_MB else 'FAIL'})  {worst_mb_case}")


if __name__ == "__main__":
    main()
