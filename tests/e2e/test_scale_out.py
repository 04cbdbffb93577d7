"""Many worker processes, one PostgreSQL queue: exactly once, nothing lost, faster.

Four ``dpcrisis worker`` processes start together (start-up is most of the cost) and warm up on
a first batch. Then, twice over, three are frozen (SIGSTOP, while idle and holding nothing) so
one worker alone runs a batch, and thawed so all four run the next. 100 jobs run on four
workers in all, 40 on one. Other work on this shared 2-core machine only ever slows a round
down, so each side is judged by its fastest round (rounds alternate, so one burst of other
load cannot hit every round of one side). Workers wake by LISTEN/NOTIFY: their poll timer is
longer than any pickup the test accepts. A batch's time is read from the database: last
``finished_at`` minus submission.
"""

import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.database import Database
from app.core.time import as_utc
from app.jobs.models import Job
from app.ledger.models import LedgerEntry
from tests.conftest import _postgres_database
from tests.e2e.workers import (
    SMALL_JOB,
    Process,
    create_dataset,
    process_env,
    processes,
    start_worker,
    submit,
    verify_ledger,
    wait_ended,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

POLL = 10.0
"""Workers' poll timer: a pickup faster than this was a NOTIFY, not a poll."""
ROUNDS, SOLO_JOBS, TEAM_JOBS = 2, 20, 50  # per round


@pytest.fixture
def pg_db(postgres_ready: bool) -> Iterator[Database]:
    if not postgres_ready:
        pytest.skip("PostgreSQL not reachable")
    yield from _postgres_database()


def _batch(database: Database, datasets: list[int], n: int, watch: list[Process]
           ) -> tuple[float, dict[int, Job]]:
    """Queue ``n`` jobs round-robin over ``datasets`` in one commit; wait until all ended.

    Returns the batch's wall time (submission to last finish, seconds) and its jobs.
    """
    done = wait_ended(database, submit(database, datasets, SMALL_JOB, n=n), watch=watch)
    queued = max(as_utc(job.created_at) for job in done.values())
    last = max(as_utc(job.finished_at) for job in done.values())
    return (last - queued).total_seconds(), done


def _pickup(done: dict[int, Job]) -> float:
    """Seconds from the batch's submission to its first start."""
    queued: datetime = max(as_utc(job.created_at) for job in done.values())
    return (min(as_utc(job.started_at) for job in done.values()) - queued).total_seconds()


def test_four_workers_run_each_job_exactly_once_and_faster_than_one(
    pg_db: Database, tmp_path: Path
) -> None:
    datasets = [create_dataset(pg_db, seed=seed) for seed in (1, 2, 3, 4)]
    env = process_env(pg_db, tmp_path, WORKER_POLL_SECONDS=str(POLL))
    solo_rates: list[float] = []
    team_rates: list[float] = []
    solo: dict[int, Job] = {}
    team: dict[int, Job] = {}
    with processes() as start:
        workers = [start_worker(start, f"w{i}", env, tmp_path, ready=False) for i in range(4)]
        for worker in workers:
            assert "PostgresListener" in worker.wait_logged("started")["message"]
        _, warm_up = _batch(pg_db, datasets, 8, workers)
        for _ in range(ROUNDS):
            for worker in workers[1:]:
                worker.signal(signal.SIGSTOP)
            seconds, done = _batch(pg_db, datasets, SOLO_JOBS, workers[:1])
            solo, solo_rates = {**solo, **done}, [*solo_rates, len(done) / seconds]
            assert _pickup(done) < POLL / 2  # NOTIFY, not the poll timer, woke the worker
            for worker in workers[1:]:
                worker.signal(signal.SIGCONT)
            seconds, done = _batch(pg_db, datasets, TEAM_JOBS, workers)
            team, team_rates = {**team, **done}, [*team_rates, len(done) / seconds]
        stopping = time.monotonic()
        for worker in workers:  # idle, in a 10 s LISTEN wait: SIGTERM must cut it short
            worker.signal(signal.SIGTERM)  # all four at once: each wait, not the exits' sum
        assert [worker.popen.wait(timeout=60) for worker in workers] == [0, 0, 0, 0]
        assert time.monotonic() - stopping < POLL

    everything = {**warm_up, **solo, **team}
    assert len(team) == 100 and len(solo) == 40
    assert all(job.status == "succeeded" for job in everything.values()), Counter(
        (job.status, job.error_code) for job in everything.values())
    # Exactly once: one claim per job across all workers' logs, by the worker the job names.
    claims = {}
    for worker in workers:
        for record in worker.records():
            if "claimed" in record.get("message", ""):
                assert record["job_id"] not in claims, f"job {record['job_id']} claimed twice"
                claims[record["job_id"]] = record["worker_id"]
    assert claims == {job_id: job.worker_id for job_id, job in everything.items()}
    assert {job.worker_id for job in solo.values()} == {
        workers[0].wait_logged("started")["worker_id"]}
    assert len({job.worker_id for job in team.values()}) == 4  # all four took part

    # One ledger entry per job, its whole plan committed; every dataset's chain verifies.
    with pg_db.session_scope() as session:
        charged = {e.job_id: (e.status, e.committed_steps, e.steps, e.released)
                   for e in session.scalars(select(LedgerEntry))}
    assert sorted(charged) == sorted(everything)
    assert all(s == "committed" and c == n and not r for s, c, n, r in charged.values())
    assert all(verify_ledger(pg_db, dataset_id)["valid"] for dataset_id in datasets)

    print(f"jobs/s by round: 1 worker {solo_rates}, 4 workers {team_rates}")
    assert max(team_rates) > max(solo_rates)
