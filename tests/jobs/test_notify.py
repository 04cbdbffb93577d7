"""Waking workers: LISTEN/NOTIFY on PostgreSQL, the in-process event elsewhere, polling last."""

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.core.database import Database
from app.flows import training as training_flow
from app.jobs import notify
from app.jobs.models import Job
from app.jobs.schemas import JobCreate
from tests.conftest import FAST_TRAINING, _postgres_database
from tests.jobs.test_queue import _submit

POLL = 10.0
"""A wait this long that ends in well under it was woken, not timed out."""


@pytest.fixture
def pg_db(postgres_ready: bool) -> Iterator[Database]:
    if not postgres_ready:
        pytest.skip("PostgreSQL not reachable")
    yield from _postgres_database()


@pytest.fixture(autouse=True)
def later() -> Iterator[Callable[..., None]]:
    """``later(seconds, fn, *args)`` on a timer thread, joined before the database goes.

    Also clears the process-wide wake-up event another test may have left set.
    """
    notify.job_submitted.clear()
    timers: list[threading.Timer] = []

    def schedule(seconds: float, fn: Callable[..., Any], *args: Any) -> None:
        timers.append(threading.Timer(seconds, fn, args=args))
        timers[-1].start()

    yield schedule
    for timer in timers:
        timer.join()


def _timed_wait(waiter: notify.Waiter, timeout: float) -> float:
    start = time.monotonic()
    waiter.wait(timeout)
    return time.monotonic() - start


@pytest.mark.postgres
def test_a_committed_job_wakes_a_listening_worker_at_once(
    pg_db: Database, later: Callable[..., None]
) -> None:
    waiter = notify.create_waiter(pg_db.url, listen=True)
    try:
        assert isinstance(waiter, notify.PostgresListener)
        assert waiter.channel.startswith("dpcrisis_jobs.t_")  # the test schema's own channel
        later(0.3, _submit, pg_db)
        assert _timed_wait(waiter, POLL) < POLL / 2
        # A job queued while the worker was busy (not waiting) ends the next wait at once.
        _submit(pg_db)
        assert _timed_wait(waiter, POLL) < 1.0
    finally:
        waiter.close()


@pytest.mark.postgres
def test_a_rolled_back_submission_wakes_nobody(pg_db: Database) -> None:
    (job_id,) = _submit(pg_db)  # a dataset to submit to, queued before anyone listens
    notify.job_submitted.clear()  # that committed submission woke this process: start afresh
    waiter = notify.create_waiter(pg_db.url, listen=True)
    try:
        with pytest.raises(RuntimeError), pg_db.session_scope() as session:
            job = session.get(Job, job_id)
            request = JobCreate.model_validate(
                {"dataset_id": job.dataset_id, "privacy": {"noise_multiplier": 2.0},
                 "training": FAST_TRAINING})
            training_flow.submit_training(session=session, request=request)  # INSERT + NOTIFY sent
            raise RuntimeError("abort before commit")
        assert _timed_wait(waiter, 0.5) >= 0.45
    finally:
        waiter.close()


@pytest.mark.postgres
def test_a_lost_listen_connection_falls_back_to_polling_and_reconnects(
    pg_db: Database, later: Callable[..., None]
) -> None:
    waiter = notify.create_waiter(pg_db.url, listen=True)
    assert isinstance(waiter, notify.PostgresListener)
    try:
        waiter.connection.close()  # as if the database restarted
        assert 0.15 <= _timed_wait(waiter, 0.2) < POLL  # polled, did not raise
        assert waiter.connection is None
        later(0.5, _submit, pg_db)
        assert _timed_wait(waiter, POLL) < POLL / 2  # listening again
    finally:
        waiter.close()


@pytest.mark.postgres
def test_a_stop_request_ends_a_listening_wait_within_a_slice(
    pg_db: Database, later: Callable[..., None]
) -> None:
    """SIGTERM sets the local event; a LISTENing worker must not sleep out its poll timer."""
    waiter = notify.create_waiter(pg_db.url, listen=True)
    try:
        later(0.3, notify.wake_workers)
        assert _timed_wait(waiter, POLL) < 0.3 + 2 * notify.STOP_CHECK_SECONDS + 0.5
    finally:
        waiter.close()


class _RecordedEvent(threading.Event):
    """The wake-up event, noting how each wait ended: True woken, False timed out."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: list[bool] = []

    def wait(self, timeout: float | None = None) -> bool:
        woken = super().wait(timeout)
        self.ended.append(woken)
        return woken


def test_sqlite_workers_use_the_in_process_event(
    db: Database, later: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Woken by the event, not by the poll timer; with nothing pending the timer ends it. How
    each wait ended is read from the event, not from a clock a loaded machine stretches."""
    event = _RecordedEvent()
    monkeypatch.setattr(notify, "job_submitted", event)
    waiter = notify.create_waiter(db.url, listen=True)
    assert isinstance(waiter, notify.EventWaiter)
    later(0.2, notify.wake_workers)
    waiter.wait(POLL)
    waiter.wait(0.2)
    assert event.ended == [True, False]
