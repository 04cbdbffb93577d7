"""A per-process memory of rows read on a hot path, forgotten when a change to them commits.

Two request paths read rows that rarely change: the API key behind a Bearer token and the model
that scores. Each remembers what it read for a short TTL, so most requests skip the database:

- a change committed in *this* process forgets everything once it commits
  (``forget_on_commit``). Forgetting before the commit would let a concurrent reader put the
  old row back between the forget and the commit;
- a read that began before such a forget stores nothing (``begin`` / ``put``);
- a change committed by another process is seen here within the TTL.
"""

import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from sqlalchemy import event
from sqlalchemy.orm import Session

V = TypeVar("V")
_PENDING = "recent_memories_to_forget"
"""``session.info`` key: the memories to forget once the session commits."""


class RecentMemory(Generic[V]):
    """Values by key, each trusted for ``ttl`` seconds after it was read."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._max_entries = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def generation(self) -> int:
        """How many times everything was forgotten (a read's ticket, see ``begin``)."""
        return self._generation

    def get(self, key: Hashable, ttl: float) -> V | None:
        """The value read for ``key`` less than ``ttl`` seconds ago, else None."""
        hit = self._entries.get(key)
        if hit is None or time.monotonic() - hit[0] > ttl:
            return None
        return hit[1]

    def begin(self) -> tuple[int, float]:
        """Call before reading the database: the ticket ``put`` needs."""
        return self._generation, time.monotonic()

    def put(self, key: Hashable, value: V, ticket: tuple[int, float]) -> None:
        """Remember ``value``, read since ``ticket``, unless everything was forgotten since."""
        generation, read_at = ticket
        with self._lock:
            if generation != self._generation:
                return  # a change committed while it was read: possibly stale
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            self._entries[key] = (read_at, value)

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def forget_on_commit(self, session: Session) -> None:
        """Forget everything once ``session`` commits (nothing if it rolls back)."""
        session.info.setdefault(_PENDING, set()).add(self)


@event.listens_for(Session, "after_commit")
def _forget_committed(session: Session) -> None:
    for memory in session.info.pop(_PENDING, ()):
        memory.forget_all()


@event.listens_for(Session, "after_rollback")
def _keep_on_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)
