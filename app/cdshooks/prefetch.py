"""Features from a CDS Hooks prefetch: the patient and their latest Observations.

The service never calls the EHR's FHIR server itself (it holds no credentials for it): what the
model needs must come in ``prefetch``. Every Observation found anywhere in it (a single
resource, or the entries of a search Bundle) is matched to a feature by ``system|code``
(``app.fhir.codes``); for each feature the latest by ``effectiveDateTime`` (then
``effectiveInstant``, ``effectivePeriod.end``/``start``, ``issued``) wins. Observations about
another patient, or whose status is not final / amended / corrected, are ignored. Age comes
from ``Patient.birthDate`` when it is there, else from a LOINC 30525-0 Observation.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from app.core.errors import DomainError, InvalidRequest
from app.datasets.encoding import CRISIS_ENCODER
from app.fhir.codes import BY_TOKEN, FEATURE_CODES, FeatureCode
from app.scoring.patients import allowed_of


def allowed_range(name: str) -> str:
    by_name = {f.name: f for f in CRISIS_ENCODER.schema.features}
    return allowed_of(by_name[name])

USABLE_STATUSES = {"final", "amended", "corrected"}
YES_CODES = {"Y", "y", "yes", "true", "373066001"}  # HL7 v2-0136 Y, SNOMED CT 373066001 |Yes|
NO_CODES = {"N", "n", "no", "false", "373067005"}  # HL7 v2-0136 N, SNOMED CT 373067005 |No|


class PrefetchIncomplete(DomainError):
    """CDS Hooks: 412 when the service cannot get the FHIR data it needs."""

    status, kind, title = 412, "prefetch-incomplete", "Prefetch lacks required data"


@dataclass(frozen=True)
class Found:
    value: float
    reference: str | None  # "Observation/<id>" when the resource has an id


def _resources(value: Any) -> Iterator[dict[str, Any]]:
    """Resources in a prefetch value: the resource itself, or a Bundle's entries."""
    if not isinstance(value, dict):
        return
    if value.get("resourceType") == "Bundle":
        for entry in value.get("entry") or []:
            if isinstance(entry, dict):
                yield from _resources(entry.get("resource"))
    elif isinstance(value.get("resourceType"), str):
        yield value


def _when(observation: Mapping[str, Any]) -> datetime:
    """When the observation applies; unknown times sort first (oldest)."""
    period = observation.get("effectivePeriod") or {}
    for raw in (observation.get("effectiveDateTime"), observation.get("effectiveInstant"),
                period.get("end"), period.get("start"), observation.get("issued")):
        if isinstance(raw, str):
            try:
                parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def _feature_of(observation: Mapping[str, Any]) -> FeatureCode | None:
    for coding in (observation.get("code") or {}).get("coding") or []:
        if isinstance(coding, dict):
            found = BY_TOKEN.get((str(coding.get("system")), str(coding.get("code"))))
            if found is not None:
                return found
    return None


def _about(observation: Mapping[str, Any], patient_id: str) -> bool:
    reference = (observation.get("subject") or {}).get("reference")
    return reference is None or reference in (f"Patient/{patient_id}", patient_id)


def _value(observation: Mapping[str, Any], code: FeatureCode) -> float | None:
    """The observation's value as the model's number, or None when it has no usable value."""
    if "valueQuantity" in observation:
        value = (observation["valueQuantity"] or {}).get("value")
    elif "valueInteger" in observation:
        value = observation["valueInteger"]
    elif "valueBoolean" in observation:
        value = observation["valueBoolean"]
    elif "valueCodeableConcept" in observation:
        binary = code.feature.kind == "binary"
        return _yes_no(observation["valueCodeableConcept"]) if binary else None
    else:
        return None
    if isinstance(value, bool):  # yes/no only for yes/no features: true is not a PHQ-9 of 1
        return None if code.feature.kind != "binary" else 1.0 if value else 0.0
    return float(value) if isinstance(value, int | float) else None


def _yes_no(concept: Any) -> float | None:
    if not isinstance(concept, dict):
        return None
    tokens = [str(c.get("code")) for c in concept.get("coding") or [] if isinstance(c, dict)]
    tokens.append(str(concept.get("text", "")).strip().lower())
    if any(t in YES_CODES for t in tokens):
        return 1.0
    if any(t in NO_CODES for t in tokens):
        return 0.0
    return None


def _age_from_patient(prefetch: Mapping[str, Any], patient_id: str, today: date) -> float | None:
    for value in prefetch.values():
        for resource in _resources(value):
            if resource.get("resourceType") != "Patient" or resource.get("id") not in (
                None, patient_id
            ):
                continue
            try:
                born = date.fromisoformat(str(resource.get("birthDate")))
            except ValueError:
                continue  # absent, or only a year / year-month: not precise enough
            return float(today.year - born.year - ((today.month, today.day)
                                                   < (born.month, born.day)))
    return None


def features_from_prefetch(
    prefetch: Mapping[str, Any] | None, *, patient_id: str, today: date
) -> tuple[dict[str, float], dict[str, str]]:
    """(features, feature -> Observation reference) for the model.

    Raises:
        PrefetchIncomplete: features the prefetch does not supply (412, each one named).
        InvalidRequest: the latest Observation of a feature has no value the model can use.
    """
    prefetch = prefetch or {}
    latest: dict[str, tuple[datetime, dict[str, Any], FeatureCode]] = {}
    for value in prefetch.values():
        for resource in _resources(value):
            if resource.get("resourceType") != "Observation":
                continue
            code = _feature_of(resource)
            status = resource.get("status", "final")
            if code is None or status not in USABLE_STATUSES or not _about(resource, patient_id):
                continue
            when = _when(resource)
            name = code.feature.name
            if name not in latest or when > latest[name][0]:
                latest[name] = (when, resource, code)

    features: dict[str, float] = {}
    references: dict[str, str] = {}
    age = _age_from_patient(prefetch, patient_id, today)
    if age is not None:
        features["age"] = age
    for name, (_, resource, code) in latest.items():
        if name in features:
            continue
        value = _value(resource, code)
        if value is None:
            raise InvalidRequest(
                f"the latest {code.feature.label} Observation ({code.token}) has no value the "
                "model can use (valueQuantity or valueInteger; valueBoolean or a yes/no "
                "valueCodeableConcept for yes/no features)",
                field=f"prefetch.{name}", allowed=allowed_range(name),
            )
        features[name] = value
        if resource.get("id"):
            references[name] = f"Observation/{resource['id']}"

    missing = [c for c in FEATURE_CODES if c.feature.name not in features]
    if missing:
        raise PrefetchIncomplete(
            "the prefetch lacks what the model needs: "
            + ", ".join(f"{c.feature.name} ({c.token})" for c in missing),
            missing=[c.feature.name for c in missing],
            errors=[
                {"field": f"prefetch.{c.feature.name}",
                 "message": f"no usable {c.feature.label} Observation ({c.token})"
                 + (" and no Patient.birthDate" if c.feature.name == "age" else ""),
                 "allowed": allowed_range(c.feature.name)}
                for c in missing
            ],
        )
    return features, references
