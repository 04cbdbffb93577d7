"""After an upload commits: fold its space's patient index and delete the index files that no
recorded index names, on one background thread, so the client never waits for either.

``after_upload`` (called by the upload flow once its transaction has committed) queues the
space; the thread runs ``upkeep`` for each queued space, one at a time (a second request for
a space already queued is the same request). A process that stops mid-fold leaves unused
files and the row naming the old index (``app.datasets.patients.index_fold``); an upload that comes
before the fold has run folds itself only when its log would pass ``MAX_SEGMENTS``.
"""

import logging
import threading

from app.core.database import Database, get_database
from app.core.memory import release_free_memory
from app.datasets.patients import index_fold
from app.datasets.patients.index_files import IndexCorrupted
from app.ledger.spaces import PatientSpace

log = logging.getLogger(__name__)


def upkeep(*, database: Database, space_id: int,
           grace: float = index_fold.GRACE_SECONDS) -> bool:
    """Fold the space's index if its log has outgrown its bounds, record it (each in its own
    short transaction), then delete the files no recorded index names; whether a fold was
    recorded (False: none needed, or an upload moved the row on first)."""
    with database.session_scope() as session:
        space = session.get(PatientSpace, space_id)
    if space is None or space.index_sha256 is None:
        return False
    try:
        folded = index_fold.fold(space)
    except IndexCorrupted:
        with database.session_scope() as session:
            now = session.get(PatientSpace, space_id, populate_existing=True)
            if now is not None and now.index_sha256 != space.index_sha256:
                return False  # the row moved on and the files read were replaced: lost race
        raise
    recorded = False
    if folded is not None:
        with database.session_scope() as session:
            recorded = index_fold.record(session=session, space_id=space_id, folded=folded)
    with database.session_scope() as session:
        index_fold.collect(session=session, space_id=space_id, grace=grace)
    release_free_memory()  # the fold's arrays: hand their pages back, as the upload route does
    return recorded


class _Queue:
    """The spaces waiting for upkeep, and the one thread that serves them."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.pending: dict[tuple[int, int], Database] = {}  # (database token, space id)
        self.running = 0
        self.thread: threading.Thread | None = None

    def put(self, database: Database, space_id: int) -> None:
        with self.changed:
            self.pending[(database.token, space_id)] = database
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._serve, name="index-upkeep",
                                               daemon=True)
                self.thread.start()
            self.changed.notify_all()

    def _serve(self) -> None:
        while True:
            with self.changed:
                while not self.pending:
                    if not self.changed.wait(timeout=60.0) and not self.pending:
                        self.thread = None  # idle a minute: the next request starts another
                        return
                (_, space_id), database = next(iter(self.pending.items()))
                del self.pending[(database.token, space_id)]
                self.running += 1
            try:
                upkeep(database=database, space_id=space_id)
            except Exception:  # noqa: BLE001  # logged; the next upload asks again
                log.exception("patient index upkeep of space %s failed", space_id)
            finally:
                with self.changed:
                    self.running -= 1
                    self.changed.notify_all()

    def wait_idle(self, timeout: float | None) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: not self.pending and not self.running,
                                         timeout=timeout)


_queue = _Queue()


def after_upload(*, space_id: int) -> None:
    """Queue the space's upkeep on the process's database (after the upload committed)."""
    _queue.put(get_database(), space_id)


def wait_idle(timeout: float | None = None) -> bool:
    """Block until no upkeep is queued or running (tests, benches, shutdown); False if
    ``timeout`` seconds passed first."""
    return _queue.wait_idle(timeout)
