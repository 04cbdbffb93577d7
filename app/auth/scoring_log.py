"""Scoring's audit events, committed before the answer leaves, by group commit.

Every other audited action commits its event with the action itself. Scoring changes nothing in
the database, so its event is its only write, and one transaction per call (an fsync each) would
tie every request to the disk. Instead calls share commits: each call queues its event (endpoint,
model, patient count, request id: never a feature) and waits until a commit holding it ends.
The call that opens a commit runs it, for itself and for every call that joined it before it
started; it starts once the commit before it has ended. A call waits at most for the commit in
progress and for its own, and under load one commit carries many calls' events
(``bench/scoring_latency.py`` measures the cost).

No thread of its own does the writing, and no finished call waits on a lock another holds:
each hand-off between threads can cost Python's 5 ms switch interval while scoring keeps the
other threads busy, and designs with a writer thread, or with every call taking the writer's
lock in turn, queued up at 200 requests/s on 2 cores under bench/scoring_latency.py
(docs/decisions/0011-scoring-audit-by-group-commit.md).

An answer therefore leaves only after its event is committed: killing the process, however
hard, loses no event of an answered call. When the commit fails, the calls waiting on it answer
503 and the events are dropped, as a rolled-back action leaves none.
"""

import logging
import threading
from typing import Any

from sqlalchemy import insert

from app.auth.models import AuditEvent
from app.core.database import Database, get_database
from app.core.errors import DomainError
from app.core.time import utcnow

WAIT_SECONDS = 60.0
"""Longest a call waits for its commit (SQLite's busy timeout is 30 s) before a 503."""
logger = logging.getLogger("dpcrisis.audit")


class AuditUnavailable(DomainError):
    """The scoring audit event could not be committed: no score is answered without one."""

    status, kind, title = 503, "audit-log-unavailable", "Audit log unavailable"
    headers = {"Retry-After": "2"}


class _Commit:
    """The events of one database that one transaction will write, and who waits for it."""

    def __init__(self, database: Database, previous: "_Commit | None") -> None:
        self.database = database
        self.previous = previous  # commits run in turn: this one starts when that one ends
        self.events: list[dict[str, Any]] = []
        self.done = threading.Event()
        self.failed = False


class ScoringLog:
    """The open commit of each database; the call that opened it runs it.

    A leader-follower group commit: the call that finds no open commit opens one and leads it;
    calls arriving before it starts join it and wait for its ``done``. The leader waits for the
    commit before its own to end (so events commit in order), closes its commit to newcomers,
    writes it and wakes its followers. No call waits on a lock another call holds while
    writing, so finished calls never queue behind each other.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _open and _last; never held while writing
        self._open: dict[int, _Commit] = {}
        self._last: _Commit | None = None

    def write(self, **fields: Any) -> None:
        """Queue one event (the ``AuditEvent`` columns) and return once it is committed.

        Raises:
            AuditUnavailable: the commit failed or did not end within ``WAIT_SECONDS``.
        """
        fields.setdefault("at", utcnow())
        database = get_database()
        with self._lock:
            commit = self._open.get(database.token)
            leader = commit is None
            if commit is None:
                commit = self._open[database.token] = _Commit(database, self._last)
                self._last = commit
            commit.events.append(fields)
        if leader:
            self._lead(commit)
        if not commit.done.wait(WAIT_SECONDS) or commit.failed:
            raise AuditUnavailable(
                "the scoring audit event could not be written, so no score is answered; "
                "retry shortly"
            )

    def _lead(self, commit: _Commit) -> None:
        if commit.previous is not None:
            commit.previous.done.wait(WAIT_SECONDS)
            commit.previous = None  # no chain of finished commits kept alive
        with self._lock:  # closed: later calls open the next commit
            if self._open.get(commit.database.token) is commit:
                del self._open[commit.database.token]
        try:
            # Core, not a Session: the ORM's unit of work would cost more CPU than the insert.
            with commit.database.engine.begin() as connection:
                connection.execute(insert(AuditEvent), commit.events)
        except Exception as exc:  # noqa: BLE001 - the waiting calls answer 503
            commit.failed = True
            logger.error("could not write scoring audit events (%s); their calls answer 503",
                         type(exc).__name__)
        finally:
            commit.done.set()


scoring_log = ScoringLog()
