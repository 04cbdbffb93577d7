"""Short leases: the heartbeat thread keeps a live job's lease, the reapers end a dead one's."""

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, update

from app.core.database import Database, set_database
from app.core.settings import settings
from app.core.time import as_utc, utcnow
from app.jobs import queue
from app.jobs.models import Job
from app.jobs.reaper import LeaseReaper
from app.main import create_app
from tests.jobs.test_queue import _before_each_epoch_record, _charge, _job, _submit
from worker.heartbeat import Heartbeat
from worker.runner import Worker

LEASE = 0.6


def _wait_until(condition: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _claim(database: Database, lease: float = LEASE) -> int:
    with database.session_scope() as session:
        job = queue.claim(session=session, worker_id="w", lease_seconds=lease)
        assert job is not None
        return job.id


def test_heartbeat_renews_the_lease_and_notices_when_it_is_lost(any_db: Database) -> None:
    _submit(any_db)
    job_id = _claim(any_db)
    first = as_utc(_job(any_db, job_id).lease_until)
    with Heartbeat(any_db, job_id=job_id, worker_id="w", lease_seconds=LEASE) as beat:
        _wait_until(lambda: as_utc(_job(any_db, job_id).lease_until) > first)
        assert not beat.lost.is_set()
        with any_db.session_scope() as session:  # the reaper took it back meanwhile
            session.execute(update(Job).where(Job.id == job_id).values(status="failed"))
        _wait_until(beat.lost.is_set)


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_a_long_gap_between_reports_does_not_lose_a_short_lease(
    any_db: Database, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two progress reports (a slow epoch) only the heartbeat renews the lease."""
    monkeypatch.setattr(settings, "worker_lease_seconds", LEASE)
    (job_id,) = _submit(any_db, epochs=2)
    reaped: list[int] = []

    def slow_epoch(epoch: int) -> None:
        if epoch == 1:
            time.sleep(3 * LEASE)  # three leases without a report
            reaped.extend(LeaseReaper(any_db).reap_once())

    _before_each_epoch_record(monkeypatch, slow_epoch)
    assert Worker(database=any_db, worker_id="w").run_once()
    assert reaped == []
    assert _job(any_db, job_id).status == "succeeded"


def test_the_api_reaps_a_dead_workers_job_with_no_worker_running(
    db: Database, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = _submit(db)
    _claim(db)
    with db.session_scope() as session:  # the worker died: its lease ran out
        session.execute(update(Job).where(Job.id == job_id)
                        .values(lease_until=utcnow() - timedelta(seconds=1)))
    monkeypatch.setattr(settings, "api_reap_seconds", 0.1)
    set_database(db)
    try:
        with TestClient(create_app(embedded_worker=False)):  # its lifespan runs the reaper
            _wait_until(lambda: _job(db, job_id).status != "running")
    finally:
        set_database(None)
    job = _job(db, job_id)
    assert job.status == "failed" and job.error_code == "worker_lost"
    planned, charged, released = _charge(db, job_id)
    assert charged == planned and not released


def test_reaping_nothing_writes_nothing(db: Database) -> None:
    """Every idle worker and API reaps often: on SQLite an UPDATE would take the write lock."""
    _submit(db)
    _claim(db, lease=60)
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2].split()[0])  # noqa: E731
    event.listen(db.engine, "before_cursor_execute", listener)
    try:
        with db.session_scope() as session:
            assert queue.reap_expired(session=session) == []
    finally:
        event.remove(db.engine, "before_cursor_execute", listener)
    assert statements == ["SELECT"]
