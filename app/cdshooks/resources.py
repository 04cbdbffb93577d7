"""Reading FHIR JSON from a CDS Hooks prefetch, which is not trusted: anything where an object
belongs is ignored, never a crash."""

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any


def as_object(value: Any) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def resources_in(value: Any) -> Iterator[dict[str, Any]]:
    """Resources in a prefetch value: the resource itself, or a Bundle's entries."""
    if not isinstance(value, dict):
        return
    if value.get("resourceType") == "Bundle":
        entries = value.get("entry")
        for entry in entries if isinstance(entries, list) else []:
            yield from resources_in(as_object(entry).get("resource"))
    elif isinstance(value.get("resourceType"), str):
        yield value


def all_resources(prefetch: Mapping[str, Any], kind: str) -> Iterator[dict[str, Any]]:
    """Every resource of type ``kind`` anywhere in the prefetch (whatever its key)."""
    for value in prefetch.values():
        for resource in resources_in(value):
            if resource.get("resourceType") == kind:
                yield resource


def codings_of(concept: Any) -> list[dict[str, Any]]:
    codings = as_object(concept).get("coding")
    return [c for c in codings if isinstance(c, dict)] if isinstance(codings, list) else []


def is_about(resource: Mapping[str, Any], patient_id: str) -> bool:
    """Whether the resource's subject is the patient (a resource without a subject is)."""
    reference = as_object(resource.get("subject")).get("reference")
    return reference is None or reference in (f"Patient/{patient_id}", patient_id)


def parse_time(raw: Any) -> datetime | None:
    """A FHIR dateTime / instant / date as an aware datetime (UTC when no zone is given)."""
    if not isinstance(raw, str):
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def reference_to(resource: Mapping[str, Any]) -> str | None:
    """``Type/id`` of a resource that has an id."""
    kind, rid = resource.get("resourceType"), resource.get("id")
    return f"{kind}/{rid}" if isinstance(kind, str) and isinstance(rid, str) else None


def when_of(resource: Mapping[str, Any]) -> datetime:
    """When an Observation (or a resource with the same time elements) applies; unknown times
    sort first (oldest)."""
    period = as_object(resource.get("effectivePeriod"))
    for raw in (resource.get("effectiveDateTime"), resource.get("effectiveInstant"),
                period.get("end"), period.get("start"), resource.get("issued")):
        parsed = parse_time(raw)
        if parsed is not None:
            return parsed
    return datetime.min.replace(tzinfo=UTC)
