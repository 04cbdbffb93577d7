"""Waking workers when a job is queued, instead of leaving them to a slow poll.

Two paths, polling (``WORKER_POLL_SECONDS``) being the fallback of both:

* In-process: a ``threading.Event`` wakes the embedded worker of the API that took the job.
* PostgreSQL: ``app.jobs.service.enqueue`` sends a NOTIFY on ``dpcrisis_jobs`` in the inserting
  transaction (delivered only if it commits), and worker processes ``LISTEN`` on a dedicated
  connection (``PostgresListener``), so workers on other machines wake at once too.
  SQLite has no such channel: its workers poll.

Channels are database-wide, so a deployment in another schema than ``public`` (set by
``?options=-csearch_path=...``) gets its own, ``dpcrisis_jobs.<schema>``: its workers are not
woken by other deployments' jobs.
"""

import logging
import threading
import time
from typing import Any, Protocol

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.core.settings import settings

logger = logging.getLogger("dpcrisis.notify")

CHANNEL = "dpcrisis_jobs"
_NOTIFY = text(
    "SELECT pg_notify(CASE current_schema() WHEN 'public' THEN :channel "
    "ELSE :channel || '.' || current_schema() END, '')"
)


def channel_for(schema: str) -> str:
    """The NOTIFY channel of the queue in ``schema``."""
    return CHANNEL if schema == "public" else f"{CHANNEL}.{schema}"

job_submitted = threading.Event()
STOP_CHECK_SECONDS = 0.25
"""How often a LISTENing worker looks up from its wait for a stop request."""


def wake_workers() -> None:
    """Wake the embedded worker now (a new job, or a stop request)."""
    job_submitted.set()


def announce_job() -> None:
    """A job was queued: wake the worker unless ``WORKER_WAKE`` is off (then it polls)."""
    if settings.worker_wake:
        wake_workers()


def wait_for_work(timeout: float) -> None:
    """Block until a job is submitted in this process or ``timeout`` seconds pass."""
    job_submitted.wait(timeout)
    job_submitted.clear()


def notify_workers(session: Session) -> None:
    """NOTIFY in the enqueuing transaction: listeners hear it only once the job is visible.

    Called by ``app.jobs.service.enqueue``, the one place that queues a job. Once the
    transaction commits, this process's embedded worker is woken too (``announce_job``);
    SQLite has no channel, so other processes' workers poll.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_NOTIFY, {"channel": CHANNEL})
    event.listen(session, "after_commit", _announce_after_commit, once=True)


def _announce_after_commit(_session: Session) -> None:
    """The job is visible now: wake this process's embedded worker."""
    announce_job()


class Waiter(Protocol):
    def wait(self, timeout: float) -> None: ...

    def close(self) -> None: ...


class EventWaiter:
    """The in-process event (embedded worker, SQLite)."""

    def wait(self, timeout: float) -> None:
        wait_for_work(timeout)

    def close(self) -> None:
        return None


class PostgresListener:
    """``LISTEN dpcrisis_jobs`` on its own autocommit connection; falls back to the event.

    A notification that arrives while the worker trains is queued on the connection and ends
    the next wait at once, so no job waits a poll interval. If the connection breaks, the wait
    degrades to the event (i.e. a poll) and the next wait reconnects.
    """

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url).set(drivername="postgresql")
        self.conninfo = url.render_as_string(hide_password=False)
        self.connection: Any = None
        self.channel = CHANNEL

    def connect(self) -> bool:
        """Open the connection and LISTEN; False (logged) when the database is unreachable."""
        import psycopg
        from psycopg import sql

        try:
            self.connection = psycopg.connect(self.conninfo, autocommit=True)
            schema = self.connection.execute("SELECT current_schema()").fetchone()[0]
            self.channel = channel_for(schema)
            self.connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as exc:
            logger.warning("LISTEN failed (%s): polling", type(exc).__name__)
            self.close()
            return False
        return True

    def wait(self, timeout: float) -> None:
        """Until a NOTIFY, a local wake-up (stop request) or ``timeout`` seconds.

        Waits in slices of ``STOP_CHECK_SECONDS``: a signal does not interrupt psycopg's wait,
        so a SIGTERM (which sets the local event) is seen within a slice, not a poll interval.
        """
        import psycopg

        if job_submitted.is_set() or (self.connection is None and not self.connect()):
            wait_for_work(timeout)
            return
        deadline = time.monotonic() + timeout
        try:
            while not job_submitted.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                wait = min(remaining, STOP_CHECK_SECONDS)
                for _ in self.connection.notifies(timeout=wait, stop_after=1):
                    return
        except psycopg.Error as exc:
            logger.warning("LISTEN connection lost (%s): polling", type(exc).__name__)
            self.close()
            wait_for_work(max(deadline - time.monotonic(), 0.0))

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            finally:
                self.connection = None


def create_waiter(database_url: str, *, listen: bool) -> Waiter:
    """A PostgreSQL listener for a worker process on PostgreSQL, else the in-process event."""
    if listen and database_url.startswith("postgresql") and settings.worker_wake:
        listener = PostgresListener(database_url)
        listener.connect()
        return listener
    return EventWaiter()
