"""The worker's ingest loop: claim a spooled upload, ingest it (``app.flows.upload.ingest``).

It runs on a thread of its own beside the job loop (``worker.runner``), so an upload never
waits for a training run to end; ``IngestLoop`` alone is what an API process without a
worker runs to ingest its own uploads (``create_app(ingest_uploads=True)``).
"""

import logging
import os
import socket
import threading

from app.core.database import Database, get_database
from app.core.settings import settings
from app.datasets.intake import upload_queue
from app.flows import upload as upload_flow

logger = logging.getLogger("dpcrisis.worker")


def ingest_once(database: Database, worker_id: str) -> bool:
    """Claim one spooled upload and ingest it. Returns whether one was claimed."""
    with database.session_scope() as session:
        upload = upload_queue.claim_next(session=session, worker_id=worker_id,
                                         lease_seconds=settings.upload_ingest_lease_seconds)
    if upload is None:
        return False
    outcome = upload_flow.ingest(upload=upload, worker_id=worker_id) or "lease lost"
    logger.info("upload %s ingested: %s", upload.id, outcome)
    return True


class IngestLoop:
    """A thread that ingests uploads until stopped, woken at once by an upload queued in
    this process (``upload_queue.upload_queued``), else every ``worker_poll_seconds``."""

    def __init__(self, database: Database | None = None, worker_id: str | None = None) -> None:
        self.database = database or get_database()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:ingest"
        self.stop_requested = threading.Event()
        self.thread = threading.Thread(target=self.run, name="dpcrisis-ingest", daemon=True)

    def run(self) -> None:
        while not self.stop_requested.is_set():
            try:
                worked = ingest_once(self.database, self.worker_id)
            except Exception:  # noqa: BLE001 - keep the loop alive; the next poll retries
                logger.exception("ingest loop error")
                worked = False
            if not worked:
                upload_queue.upload_queued.wait(settings.worker_poll_seconds)
                upload_queue.upload_queued.clear()

    def start(self) -> "IngestLoop":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_requested.set()
        upload_queue.upload_queued.set()
        self.thread.join(timeout)
