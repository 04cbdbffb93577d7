"""Scoring's audit events, written off the request path in small batches.

Every other audited action commits its event with the action itself. Scoring changes nothing
in the database, so giving each call its own committed transaction (an fsync on SQLite) would
cost more than scoring does and would break the 10 ms p99 goal at 200 requests/s. Instead each
call's event (endpoint, model, patient count, request id: never a feature) is queued and a
writer thread commits everything queued in one transaction, at most ``FLUSH_SECONDS`` later.
Reading the audit log flushes first, and the API flushes at shutdown, so only a hard crash can
lose the last fraction of a second of scoring counts, never a charge or any other action.
"""

import logging
import queue
import threading
from typing import Any

from sqlalchemy import insert

from app.auth.models import AuditEvent
from app.core.database import Database, get_database
from app.core.time import utcnow

FLUSH_SECONDS = 0.25
logger = logging.getLogger("dpcrisis.audit")


class ScoringLog:
    """A queue of pending events per database and one daemon thread that commits them."""

    def __init__(self) -> None:
        self._pending: queue.SimpleQueue[tuple[Database, dict[str, Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()  # one flush at a time: events commit in order
        self._thread: threading.Thread | None = None

    def add(self, **fields: Any) -> None:
        """Queue one event (the ``AuditEvent`` columns); stamped now, committed soon."""
        fields.setdefault("at", utcnow())
        self._pending.put((get_database(), fields))
        if self._thread is None:
            self._start()

    def flush(self) -> int:
        """Commit everything queued so far; returns how many events were written."""
        with self._lock:
            batches: dict[int, tuple[Database, list[dict[str, Any]]]] = {}
            while True:
                try:
                    database, fields = self._pending.get_nowait()
                except queue.Empty:
                    break
                batches.setdefault(id(database), (database, []))[1].append(fields)
            written = 0
            for database, events in batches.values():
                try:
                    with database.session_scope() as session:
                        # One executemany, no ORM objects: the flush holds the GIL briefly,
                        # so it barely delays the requests it runs beside.
                        session.execute(insert(AuditEvent), events)
                except Exception:
                    for fields in events:  # keep them for the next flush
                        self._pending.put((database, fields))
                    raise
                written += len(events)
            return written

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="dpcrisis-scoring-log", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(FLUSH_SECONDS):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a database blip must not end the writer
                logger.exception("could not write scoring audit events; will retry")


scoring_log = ScoringLog()
