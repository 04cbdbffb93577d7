"""Jobs per minute with 1, 2 and 4 ``dpcrisis worker`` processes on one PostgreSQL queue.

Each round starts N workers on a fresh schema, waits until all LISTEN, queues ``--jobs`` small
DP-SGD jobs in one transaction (round-robin over 4 datasets) and reads from the database:

- throughput: jobs / (last ``finished_at`` - submission), as jobs per minute;
- queue wait: ``started_at - created_at`` per job of the batch (p50, p95: mostly the backlog);
- pickup latency: ``--singles`` jobs submitted one at a time to idle workers, submit -> running
  (p50, p95): how fast LISTEN/NOTIFY wakes a worker (its poll timer is 10 s here);
- job time: ``finished_at - started_at`` (p50), which grows when workers share too few cores.

Ratios are against the 1-worker round of the same run. Usage::

    .venv/bin/python bench/worker_throughput.py [--jobs 60] [--workers 1 2 4]

``DPCRISIS_BENCH_POSTGRES_URL`` (default: the tests' server) names the database; each round
uses its own schema, dropped afterwards.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, func, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.database import Database  # noqa: E402
from app.core.migrations import upgrade_head  # noqa: E402
from app.core.time import as_utc  # noqa: E402
from app.datasets import service as dataset_service  # noqa: E402
from app.datasets.schemas import DatasetCreate  # noqa: E402
from app.flows import training as training_flow  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from bench.service import CLI  # noqa: E402

POSTGRES_URL = os.environ.get(
    "DPCRISIS_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SMALL_JOB = {"epochs": 1, "batch_size": 8, "model": "mlp", "hidden_units": 64}
"""A small job: 350 noisy steps of a 64-unit MLP on 4,000 rows, one progress report."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _datasets(database: Database) -> list[int]:
    with database.session_scope() as session:
        return [
            dataset_service.create(session=session, request=DatasetCreate.model_validate(
                {"name": f"bench-{seed}", "source": {"kind": "synthetic", "n_rows": 4000,
                                                     "seed": seed},
                 "privacy_budget": {"epsilon": 100.0, "delta": 1e-6}})).id
            for seed in range(1, 5)
        ]


def _queue(database: Database, datasets: list[int], n_jobs: int) -> list[int]:
    """``n_jobs`` jobs round-robin over the datasets, in one transaction."""
    with database.session_scope() as session:
        return [
            training_flow.submit_training(session=session, request=JobCreate.model_validate(
                {"dataset_id": datasets[i % len(datasets)], "privacy": {"noise_multiplier": 5.0},
                 "training": SMALL_JOB})).id
            for i in range(n_jobs)
        ]


def _finished(database: Database, ids: list[int]) -> list[Job]:
    """Poll (a cheap count) until every job has finished; then the jobs."""
    unfinished = select(func.count()).where(Job.id.in_(ids), Job.finished_at.is_(None))
    while True:
        with database.session_scope() as session:
            if not session.scalar(unfinished):
                return list(session.scalars(select(Job).where(Job.id.in_(ids))))
        time.sleep(0.1)


def _pickups(database: Database, datasets: list[int], n: int) -> list[float]:
    """Submit -> running of ``n`` jobs queued one at a time to idle workers, seconds."""
    out = []
    for _ in range(n):
        (job,) = _finished(database, _queue(database, datasets, 1))
        out.append((as_utc(job.started_at) - as_utc(job.created_at)).total_seconds())
    return out


def _wait_ready(logs: list[Path], seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not all("started on" in p.read_text(errors="replace") for p in logs):
        if time.monotonic() > deadline:
            raise SystemExit("workers did not start:\n" + logs[0].read_text()[-2000:])
        time.sleep(0.2)


def run_round(n_workers: int, n_jobs: int, singles: int, root: Path) -> dict[str, float]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    env = {**os.environ, "DATABASE_URL": url, "ARTIFACT_DIR": str(root / "artifacts"),
           "WORKER_POLL_SECONDS": "10", "LOG_FORMAT": "json"}
    workers: list[subprocess.Popen[bytes]] = []
    try:
        upgrade_head(url)
        database = Database(url)
        logs = [root / f"{schema}-w{i}.log" for i in range(n_workers)]
        for log in logs:
            with log.open("wb") as out:
                # One session each, as separate services: under autogroup scheduling the
                # processes of one session share a single CPU share.
                workers.append(subprocess.Popen([CLI, "worker"], env=env, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True))
        _wait_ready(logs)
        datasets = _datasets(database)
        jobs = _finished(database, _queue(database, datasets, n_jobs))
        assert all(j.status == "succeeded" for j in jobs), [j.error for j in jobs]
        pickups = _pickups(database, datasets, singles)
        queued = max(as_utc(j.created_at) for j in jobs)
        wall = (max(as_utc(j.finished_at) for j in jobs) - queued).total_seconds()
        waits = [(as_utc(j.started_at) - as_utc(j.created_at)).total_seconds() for j in jobs]
        runs = [(as_utc(j.finished_at) - as_utc(j.started_at)).total_seconds() for j in jobs]
        database.dispose()
        return {"jobs_per_min": 60 * n_jobs / wall, "wall": wall,
                "p50": percentile(waits, 0.5), "p95": percentile(waits, 0.95),
                "pick50": percentile(pickups, 0.5), "pick95": percentile(pickups, 0.95),
                "run_p50": statistics.median(runs)}
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--singles", type=int, default=20, help="jobs for the pickup latency")
    args = parser.parse_args()
    print(f"{args.jobs} jobs per round ({SMALL_JOB}, 4,000 rows), cores: {os.cpu_count()}, "
          f"load average: {os.getloadavg()[0]:.1f}")
    print(f"{'workers':>7} {'jobs/min':>9} {'x 1':>6} {'wall s':>7} {'wait p50':>9} "
          f"{'wait p95':>9} {'pickup p50':>11} {'pickup p95':>11} {'job p50':>8}")
    baseline = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.workers:
            r = run_round(n, args.jobs, args.singles, Path(tmp))
            baseline = baseline or r["jobs_per_min"]
            print(f"{n:>7} {r['jobs_per_min']:>9.0f} {r['jobs_per_min'] / baseline:>6.2f} "
                  f"{r['wall']:>7.1f} {r['p50']:>9.2f} {r['p95']:>9.2f} "
                  f"{1000 * r['pick50']:>9.0f}ms {1000 * r['pick95']:>9.0f}ms "
                  f"{r['run_p50']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
