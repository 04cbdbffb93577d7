"""A running job's heartbeat: renew its lease from a side thread every ``lease / 3`` seconds.

Progress reports renew the lease too, but they can be minutes apart (a long epoch, a slow
evaluation, writing the artifact). Renewing from a thread decouples the lease from the training
loop, so the lease can be short (seconds) and a killed worker's job is failed soon after.
Three beats per lease: one missed beat (a slow transaction) does not lose the job.
"""

import contextvars
import logging
import threading
from types import TracebackType

from app.core.database import Database
from app.jobs import queue

logger = logging.getLogger("dpcrisis.worker")


class Heartbeat:
    """Use as ``with Heartbeat(...) as beat:``; ``beat.lost`` is set once the lease is gone."""

    def __init__(
        self, database: Database, *, job_id: int, worker_id: str, lease_seconds: float
    ) -> None:
        self.database = database
        self.job_id = job_id
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the job id tags this thread's records too
        self._thread = threading.Thread(
            target=context.run, args=(self._loop,), name=f"dpcrisis-heartbeat-{job_id}",
            daemon=True,
        )

    def beat(self) -> bool:
        """Renew the lease once; False when the job is no longer this worker's."""
        with self.database.session_scope() as session:
            return queue.heartbeat(
                session=session, job_id=self.job_id, worker_id=self.worker_id,
                lease_seconds=self.lease_seconds,
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                owned = self.beat()
            except Exception:  # noqa: BLE001 - retry at the next beat; the lease has slack
                logger.warning("heartbeat failed; retrying", exc_info=True)
                continue
            if not owned:
                self.lost.set()
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(self.lease_seconds)
