"""The worker: claim a job, run the task registered for its kind (``worker.handlers``), with
heartbeats and a clean stop; spooled uploads are ingested beside it (``worker.ingest``).

Runs as its own process (``dpcrisis worker``) or as a thread inside the API (``dpcrisis serve``).
"""

import logging
import os
import socket
import threading
import traceback

import torch

from app.core.database import Database, get_database
from app.core.logs import job_context
from app.core.settings import settings
from app.flows import job_run
from app.jobs import notify, queue
from app.jobs.models import FAILED
from worker import handlers, tasks
from worker.handlers import ClaimedJob, UnknownKind
from worker.heartbeat import Heartbeat
from worker.ingest import IngestLoop
from worker.tasks import LeaseLost
from worker.training import pick_device

logger = logging.getLogger("dpcrisis.worker")


class Worker:
    """One worker; ``run_once`` handles at most one job (tests call it directly)."""

    def __init__(
        self, database: Database | None = None, worker_id: str | None = None, *,
        listen: bool = True,
    ) -> None:
        self.database = database or get_database()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_seconds = settings.worker_lease_seconds
        self.device = pick_device(settings.device)
        self.stop_requested = threading.Event()
        self.listen = listen  # LISTEN for NOTIFY on PostgreSQL (the embedded worker does not)
        self.heartbeat: Heartbeat | None = None  # of the job running now
        if self.device.type == "cpu":
            # The vectorised engine's tensors are small: one thread is 1.2-9x faster than two
            # here (no cross-core handoff per step, no waiting on a busy core).
            torch.set_num_threads(settings.torch_threads or 1)
        elif settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)

    def run_forever(self) -> None:
        # torch.optim imports torch._dynamo lazily on the first optimizer (a slow import):
        # pay it before announcing readiness, not in the first job's latency.
        import torch._dynamo  # noqa: F401

        # LISTEN before the first claim: a job queued in between still wakes the first wait.
        waiter = notify.create_waiter(self.database.url, listen=self.listen)
        logger.info("worker %s started on %s (%s)", self.worker_id, self.device,
                    type(waiter).__name__, extra={"worker_id": self.worker_id})
        uploads = IngestLoop(self.database, f"{self.worker_id}:ingest").start()
        try:
            while not self.stop_requested.is_set():
                try:
                    worked = self.run_once()
                except Exception:  # noqa: BLE001 - keep the worker alive; the job was failed
                    logger.exception("worker loop error")
                    worked = False
                if not worked and not self.stop_requested.is_set():
                    waiter.wait(settings.worker_poll_seconds)
        finally:
            uploads.stop()
            waiter.close()
        logger.info("worker %s stopped", self.worker_id, extra={"worker_id": self.worker_id})

    def run_once(self) -> bool:
        """Reap lost jobs, claim one queued job and run it. Returns whether a job ran."""
        with self.database.session_scope() as session:
            reaped = queue.reap_expired(session=session)
        for job_id in reaped:
            logger.warning("job %s failed: worker lost", job_id)
        with self.database.session_scope() as session:
            job = job_run.claim(
                session=session, worker_id=self.worker_id, lease_seconds=self.lease_seconds
            )
            if job is None:
                return False
            job_id, kind = job.id, job.kind
            try:
                claimed = handlers.claimed_of(job)
            except UnknownKind:
                claimed = None
        if claimed is None:
            logger.error("job %s failed: no task handler for job kind %s", job_id, kind)
            tasks.finish(self, job_id, FAILED, error_code="unknown_job_kind",
                         error=f"no task handler for job kind {kind}")
            return True
        heartbeat = Heartbeat(self.database, job_id=claimed.job_id, worker_id=self.worker_id,
                              lease_seconds=self.lease_seconds)
        with job_context(claimed.job_id), heartbeat:
            self.heartbeat = heartbeat
            try:
                self._run(claimed)
            finally:
                self.heartbeat = None
        return True

    def _run(self, claimed: ClaimedJob) -> None:
        logger.info("job %s claimed", claimed.job_id, extra={"worker_id": self.worker_id})
        try:
            outcome = handlers.handler_for(claimed.kind).run(self, claimed)
        except LeaseLost:
            logger.warning("job %s: lease lost, results discarded", claimed.job_id)
            return
        except Exception as exc:  # noqa: BLE001 - any failure ends the job as failed
            logger.error("job %s failed: %s", claimed.job_id, traceback.format_exc(limit=3))
            tasks.finish(self, claimed.job_id, FAILED, error_code="training_error",
                         error=type(exc).__name__)
            return
        logger.info("job %s %s", claimed.job_id, outcome)


class EmbeddedWorker:
    """A worker thread inside the API process (the zero-set-up default)."""

    def __init__(self) -> None:
        self.worker = Worker(listen=False)  # woken by the in-process event
        self.thread = threading.Thread(target=self.worker.run_forever, name="dpcrisis-worker",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop_requested.set()
        notify.wake_workers()
        self.thread.join(timeout)
