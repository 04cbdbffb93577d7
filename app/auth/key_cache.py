"""A short-lived, per-process memory of verified keys, so most requests skip the key lookup.

The lookup is a database round trip in a worker thread: on the single-patient scoring path it
cost about as much as the scoring. A verified key is remembered for ``TTL_SECONDS``; a revoke
in this process forgets every key at once, and a revoke elsewhere (another API process, the
CLI) takes effect here within ``TTL_SECONDS``. Unknown keys are never remembered.
"""

import threading
import time
from dataclasses import dataclass

TTL_SECONDS = 1.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class VerifiedKey:
    key_id: int
    name: str
    role: str


_lock = threading.Lock()
_entries: dict[tuple[int, str], tuple[float, VerifiedKey]] = {}


def get(database_id: int, key_digest: str) -> VerifiedKey | None:
    """The remembered key, if it was verified less than ``TTL_SECONDS`` ago."""
    hit = _entries.get((database_id, key_digest))
    if hit is None or time.monotonic() - hit[0] > TTL_SECONDS:
        return None
    return hit[1]


def put(database_id: int, key_digest: str, key: VerifiedKey) -> None:
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
        _entries[(database_id, key_digest)] = (time.monotonic(), key)


def forget_all() -> None:
    """Called on every revoke: a revoked key must not outlive its revocation here."""
    with _lock:
        _entries.clear()
