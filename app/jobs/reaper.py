"""The API's lease reaper: fails jobs whose worker died, even when no other worker is running.

Idle workers reap too (``Worker.run_once``), but a deployment whose only worker was killed has
nobody left to notice; the API process always runs, so it sweeps every ``API_REAP_SECONDS``
(default: a third of the lease). Many reapers are safe: ``reap_expired`` is one conditional
UPDATE per job and the ledger commit is idempotent under the dataset lock.
"""

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.core.database import Database, get_database
from app.core.settings import settings
from app.jobs import queue

logger = logging.getLogger("dpcrisis.reaper")


def reap_interval() -> float:
    """Seconds between sweeps: ``API_REAP_SECONDS``, or a third of the lease."""
    return settings.api_reap_seconds or settings.worker_lease_seconds / 3


class LeaseReaper:
    """A daemon thread sweeping expired leases until stopped."""

    def __init__(self, database: Database | None = None, interval: float | None = None) -> None:
        self.database = database  # None: the process-wide database, looked up at each sweep
        self.interval = interval or reap_interval()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dpcrisis-reaper", daemon=True)

    def reap_once(self) -> list[int]:
        with (self.database or get_database()).session_scope() as session:
            reaped = queue.reap_expired(session=session)
        for job_id in reaped:
            logger.warning("job %s failed: worker lost (lease expired)", job_id,
                           extra={"job_id": job_id})
        return reaped

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.reap_once()
            except Exception:  # noqa: BLE001 - a database blip must not end the sweeps
                logger.exception("lease reaper sweep failed")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


@contextmanager
def running_reaper(database: Database | None = None) -> Iterator[LeaseReaper]:
    """Run a reaper for the duration of the block (the API's lifespan)."""
    reaper = LeaseReaper(database)
    reaper.start()
    try:
        yield reaper
    finally:
        reaper.stop()
