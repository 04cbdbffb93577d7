"""What each ledger record's hash covers, under each hash scheme (``app.ledger.chain``).

Every ``ledger_event`` carries ``hash = sha256(canonical_json(content) + prev_hash)``.
Canonical JSON: sorted keys, no whitespace, floats by ``repr``, timestamps as ISO 8601 in UTC
(SQLite hands timestamps back naive, PostgreSQL in the session time zone: both are normalised).

Each record is hashed under the scheme in its ``scheme`` column. Scheme 1: the content exactly
as records were hashed before entries stored their dp-accounting event, so those records keep
their hashes (migrations 0002 and 0003 call these functions with it too). Scheme 2: the
content also names its scheme, a reserve's entry content includes the entry's stored
``event``, and a ``scheme`` record's content the stored events of the entries reserved before
it (``reserved_events``).
"""

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from app.core.time import as_utc
from app.ledger.models import EVENT_SCHEME, LEGACY_SCHEME

_ENTRY_FLOATS = ("noise_multiplier", "sample_rate", "clip_norm", "delta")
_ENTRY_OPTIONAL_FLOATS = ("epsilon_rdp", "epsilon_prv")
_ENTRY_INTS = ("id", "dataset_id", "steps")
_ENTRY_STRINGS = ("mechanism", "accountant")


def iso_utc(value: datetime) -> str:
    """ISO 8601 in UTC, whatever the driver handed back (naive from SQLite, offset from PG)."""
    aware = as_utc(value)
    assert aware is not None
    return aware.astimezone(UTC).isoformat()


def entry_content(entry: Any, scheme: int = LEGACY_SCHEME) -> dict[str, Any]:
    """The privacy-relevant fields of a ledger entry, typed so a reload hashes the same.

    A statistics release's entry adds its release id and its components (the noise multiplier
    of each noisy vector); a job's entry hashes exactly as before they existed. From scheme 2
    the entry's dp-accounting event (its stored JSON) is covered too, and, on entries that
    record it, whom the release left out (salted: ``app.ledger.left_out.recorded``).
    """
    content: dict[str, Any] = {name: float(getattr(entry, name)) for name in _ENTRY_FLOATS}
    for name in _ENTRY_OPTIONAL_FLOATS:
        value = getattr(entry, name)
        content[name] = None if value is None else float(value)
    content.update({name: int(getattr(entry, name)) for name in _ENTRY_INTS})
    content.update({name: str(getattr(entry, name)) for name in _ENTRY_STRINGS})
    content["created_at"] = iso_utc(entry.created_at)
    release_id = getattr(entry, "statistics_release_id", None)
    content["job_id"] = None if entry.job_id is None else int(entry.job_id)
    if release_id is not None:
        content["statistics_release_id"] = int(release_id)
        content["components"] = [float(c) for c in entry.components or []]
    if scheme >= EVENT_SCHEME:
        content["event"] = entry.event
    left_out = getattr(entry, "left_out", None)
    if left_out is not None:  # entries from before it keep their hashes
        content["left_out"] = left_out
    tail = getattr(entry, "tail_probability", None)
    if tail is not None:
        content["tail_probability"] = float(tail)
    return content


def event_content(
    *,
    dataset_id: int,
    entry_id: int | None,
    seq: int,
    kind: str,
    created_at: datetime,
    entry: Any | None,
    steps: int | None = None,
    budget: tuple[float | None, float | None] | None = None,
    scheme: int = LEGACY_SCHEME,
    events: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What an event's hash covers under ``scheme``; ``entry`` (its ledger_entry) only for a
    reserve event, ``events`` (entry id -> stored event) only for a scheme record.

    ``steps`` (commit) and ``budget`` (budget event) are hashed only when present, so records
    written before they existed keep their hashes; ``scheme`` is hashed from scheme 2 on.
    """
    content: dict[str, Any] = {
        "dataset_id": int(dataset_id),
        "entry_id": None if entry_id is None else int(entry_id),
        "seq": int(seq),
        "kind": str(kind),
        "created_at": iso_utc(created_at),
        "entry": entry_content(entry, scheme) if entry is not None else None,
    }
    if scheme >= EVENT_SCHEME:
        content["scheme"] = int(scheme)
    if events is not None:
        content["events"] = events
    if steps is not None:
        content["steps"] = int(steps)
    if budget is not None:
        content["budget"] = {
            "epsilon": None if budget[0] is None else float(budget[0]),
            "delta": None if budget[1] is None else float(budget[1]),
        }
    return content


def canonical_json(content: dict[str, Any]) -> str:
    """``content`` as canonical JSON: sorted keys, no whitespace, no NaN."""
    return json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)


def record_hash(content: dict[str, Any], prev_hash: str) -> str:
    """sha256 hex of the canonical JSON followed by the previous record's hash."""
    return hashlib.sha256((canonical_json(content) + prev_hash).encode("utf-8")).hexdigest()


def reserved_events(entries: list[Any]) -> dict[str, Any]:
    """What a scheme record commits to: each earlier-reserved entry's stored event, by id."""
    return {str(int(entry.id)): entry.event for entry in entries}
