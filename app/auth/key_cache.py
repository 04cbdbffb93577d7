"""A short-lived, per-process memory of verified keys, so most requests skip the key lookup.

The lookup is a database round trip in a worker thread: on the single-patient scoring path it
cost about as much as the scoring. A verified key is remembered for ``TTL_SECONDS``; a revoke
committed in this process forgets every key as it commits, and a revoke elsewhere (another API
process, the CLI) takes effect here within ``TTL_SECONDS`` (``app.core.recent``). Unknown keys
are never remembered.
"""

from dataclasses import dataclass

from app.core.recent import RecentMemory

TTL_SECONDS = 1.0


@dataclass(frozen=True)
class VerifiedKey:
    key_id: int
    name: str
    role: str


remembered: RecentMemory[VerifiedKey] = RecentMemory()
"""Keyed by (database token, key digest)."""
