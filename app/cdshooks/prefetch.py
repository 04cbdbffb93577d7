"""Features from a CDS Hooks prefetch: the patient and their latest Observations.

The service never calls the EHR's FHIR server itself (it holds no credentials for it): what the
model needs must come in ``prefetch``, and what it needs is the scoring model's schema
(``sources_of``):

- a feature with a declared code (``app.fhir.codes``) is read from Observations of that
  ``system|code``, found anywhere in the prefetch (a single resource, or the entries of a
  search Bundle); for each feature the latest by ``effectiveDateTime`` (then
  ``effectiveInstant``, ``effectivePeriod.end``/``start``, ``issued``) wins. Observations about
  another patient, or whose status is not final / amended / corrected, are ignored;
- age (the numeric or integer feature coded LOINC 30525-0, else the one named ``age``) comes
  from ``Patient.birthDate`` when it is there, else from an Observation of its code;
- a feature without a declared code cannot be prefetched: no EHR records Observations in this
  service's local code system on its own. It is taken from a request body only (``/v1/risk``),
  and a hook call answers an "insufficient data" card naming it.

The one exception: the built-in crisis schema's uncoded features (GAF, sessions, substance
use, prior crisis) keep the local codes this service published for them before schemas existed
(``FEATURE_SYSTEM|gaf``, ...), so EHRs set up for the crisis model keep working.

Values: numeric and integer features from valueQuantity / valueInteger; yes/no features from
valueBoolean or a yes/no valueCodeableConcept (numbers 0/1 too); categorical features from a
valueCodeableConcept whose coding's code or text is a category, or a valueString.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from app.core.errors import DomainError, InvalidRequest
from app.datasets.dataset_schema import FeatureKind, FeatureSpec
from app.datasets.encoding import CRISIS_ENCODER, Encoder
from app.fhir.codes import AGE_LOINC, LOINC, FeatureCode, code_of, label_of
from app.scoring.patients import allowed_of

USABLE_STATUSES = {"final", "amended", "corrected"}
YES_CODES = {"Y", "y", "yes", "true", "373066001"}  # HL7 v2-0136 Y, SNOMED CT 373066001 |Yes|
NO_CODES = {"N", "n", "no", "false", "373067005"}  # HL7 v2-0136 N, SNOMED CT 373067005 |No|
NUMBERED = (FeatureKind.NUMERIC, FeatureKind.INTEGER)

Value = float | str
"""A prefetched value as the model's features take it (a categorical feature: its category)."""


class PrefetchIncomplete(DomainError):
    """CDS Hooks: 412 when the service cannot get the FHIR data it needs."""

    status, kind, title = 412, "prefetch-incomplete", "Prefetch lacks required data"


@dataclass(frozen=True, eq=False)
class Sources:
    """Where each feature of one schema comes from in a prefetch."""

    features: tuple[FeatureSpec, ...]  # the schema's, in order
    observed: tuple[FeatureCode, ...]  # read from Observations of their code (age too)
    age: FeatureSpec | None  # from Patient.birthDate first
    unavailable: tuple[FeatureSpec, ...]  # no code: never in a prefetch

    @property
    def needed(self) -> tuple[FeatureSpec, ...]:
        """The features a prefetch can and must supply, in the schema's order."""
        gone = {f.name for f in self.unavailable}
        return tuple(f for f in self.features if f.name not in gone)


def _age_feature(features: tuple[FeatureSpec, ...]) -> FeatureSpec | None:
    numbered = [f for f in features if f.kind in NUMBERED]
    coded = [f for f in numbered
             if f.code is not None and (f.code.system, f.code.code) == (LOINC, AGE_LOINC)]
    named = [f for f in numbered if f.name == "age"]
    return next(iter(coded or named), None)


_sources: dict[str, Sources] = {}


def sources_of(encoder: Encoder) -> Sources:
    """Where the features of ``encoder``'s schema come from (built once per schema)."""
    found = _sources.get(encoder.hash)
    if found is None:
        features = tuple(encoder.schema.features)
        legacy = encoder.hash == CRISIS_ENCODER.hash
        observed = tuple(code_of(f) for f in features if f.code is not None or legacy)
        age = _age_feature(features)
        supplied = {c.feature.name for c in observed} | ({age.name} if age else set())
        unavailable = tuple(f for f in features if f.name not in supplied)
        found = _sources[encoder.hash] = Sources(features, observed, age, unavailable)
    return found


def _object(value: Any) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (a prefetch is not trusted)."""
    return value if isinstance(value, dict) else {}


def _resources(value: Any) -> Iterator[dict[str, Any]]:
    """Resources in a prefetch value: the resource itself, or a Bundle's entries."""
    if not isinstance(value, dict):
        return
    if value.get("resourceType") == "Bundle":
        entries = value.get("entry")
        for entry in entries if isinstance(entries, list) else []:
            yield from _resources(_object(entry).get("resource"))
    elif isinstance(value.get("resourceType"), str):
        yield value


def _when(observation: Mapping[str, Any]) -> datetime:
    """When the observation applies; unknown times sort first (oldest)."""
    period = _object(observation.get("effectivePeriod"))
    for raw in (observation.get("effectiveDateTime"), observation.get("effectiveInstant"),
                period.get("end"), period.get("start"), observation.get("issued")):
        if isinstance(raw, str):
            try:
                parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def _codings(concept: Any) -> list[dict[str, Any]]:
    codings = _object(concept).get("coding")
    return [c for c in codings if isinstance(c, dict)] if isinstance(codings, list) else []


def _about(observation: Mapping[str, Any], patient_id: str) -> bool:
    reference = _object(observation.get("subject")).get("reference")
    return reference is None or reference in (f"Patient/{patient_id}", patient_id)


def _yes_no(concept: Any) -> float | None:
    tokens = [str(c.get("code")) for c in _codings(concept)]
    tokens.append(str(_object(concept).get("text", "")).strip().lower())
    if any(t in YES_CODES for t in tokens):
        return 1.0
    if any(t in NO_CODES for t in tokens):
        return 0.0
    return None


def _category(observation: Mapping[str, Any], feature: FeatureSpec) -> str | None:
    """The category a valueCodeableConcept (a coding's code, else its text) or valueString
    names: exactly, else ignoring case where that is unambiguous."""
    if "valueString" in observation:
        candidates = [observation["valueString"]]
    else:
        concept = _object(observation.get("valueCodeableConcept"))
        candidates = [c.get("code") for c in _codings(concept)] + [concept.get("text")]
    texts = [c.strip() for c in candidates if isinstance(c, str)]
    categories = feature.categories or []
    for text in texts:
        if text in categories:
            return text
    for text in texts:
        same = [c for c in categories if c.casefold() == text.casefold()]
        if len(same) == 1:
            return same[0]
    return None


def _value(observation: Mapping[str, Any], feature: FeatureSpec) -> Value | None:
    """The observation's value as the model takes it, or None when it has none it can use."""
    binary = feature.kind is FeatureKind.BINARY
    if feature.kind is FeatureKind.CATEGORICAL:
        return _category(observation, feature)
    if "valueQuantity" in observation:
        value = _object(observation["valueQuantity"]).get("value")
    elif "valueInteger" in observation:
        value = observation["valueInteger"]
    elif "valueBoolean" in observation:
        value = observation["valueBoolean"]
    elif "valueCodeableConcept" in observation:
        return _yes_no(observation["valueCodeableConcept"]) if binary else None
    else:
        return None
    if isinstance(value, bool):  # yes/no only for yes/no features: true is not a PHQ-9 of 1
        return None if not binary else 1.0 if value else 0.0
    return float(value) if isinstance(value, int | float) else None


EXPECTED = {
    FeatureKind.NUMERIC: "valueQuantity or valueInteger",
    FeatureKind.INTEGER: "valueQuantity or valueInteger",
    FeatureKind.BINARY: "valueBoolean, a yes/no valueCodeableConcept, or 0/1",
    FeatureKind.CATEGORICAL: "valueCodeableConcept or valueString naming a category",
}


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


def _latest(prefetch: Mapping[str, Any], sources: Sources, patient_id: str
            ) -> dict[str, tuple[dict[str, Any], FeatureCode]]:
    """For each observed feature, its latest usable Observation about this patient."""
    by_token: dict[tuple[str, str], list[FeatureCode]] = {}
    for c in sources.observed:
        by_token.setdefault((c.system, c.code), []).append(c)
    latest: dict[str, tuple[datetime, dict[str, Any], FeatureCode]] = {}
    for value in prefetch.values():
        for resource in _resources(value):
            if resource.get("resourceType") != "Observation":
                continue
            status = resource.get("status", "final")
            if status not in USABLE_STATUSES or not _about(resource, patient_id):
                continue
            codes = [c for coding in _codings(resource.get("code"))
                     for c in by_token.get((str(coding.get("system")),
                                            str(coding.get("code"))), [])]
            when = _when(resource)
            for c in codes:
                name = c.feature.name
                if name not in latest or when > latest[name][0]:
                    latest[name] = (when, resource, c)
    return {name: (resource, c) for name, (_, resource, c) in latest.items()}


@dataclass(frozen=True)
class Prefetched:
    values: dict[str, Value]
    references: dict[str, str]  # feature -> "Observation/<id>" when the resource has an id
    missing: tuple[FeatureSpec, ...]  # needed features the prefetch does not supply


def features_from_prefetch(
    prefetch: Mapping[str, Any] | None, *, sources: Sources, patient_id: str, today: date
) -> Prefetched:
    """The values the prefetch gives for the schema's features, and what it lacks.

    Raises:
        InvalidRequest: the latest Observation of a feature has no value the model can use.
    """
    prefetch = prefetch if isinstance(prefetch, Mapping) else {}
    values: dict[str, Value] = {}
    references: dict[str, str] = {}
    if sources.age is not None:
        age = _age_from_patient(prefetch, patient_id, today)
        if age is not None:
            values[sources.age.name] = age
    for name, (resource, code) in _latest(prefetch, sources, patient_id).items():
        if name in values:
            continue
        value = _value(resource, code.feature)
        if value is None:
            raise InvalidRequest(
                f"the latest {label_of(code.feature)} Observation ({code.token}) has no value "
                f"the model can use ({EXPECTED[code.feature.kind]})",
                field=f"prefetch.{name}", allowed=allowed_of(code.feature),
            )
        values[name] = value
        if isinstance(resource.get("id"), str):
            references[name] = f"Observation/{resource['id']}"
    missing = tuple(f for f in sources.needed if f.name not in values)
    return Prefetched(values, references, missing)


def _lacks(feature: FeatureSpec, sources: Sources) -> str:
    code = next((c for c in sources.observed if c.feature.name == feature.name), None)
    observation = (f"no usable {label_of(feature)} Observation ({code.token})"
                   if code is not None else "")
    is_age = sources.age is not None and feature.name == sources.age.name
    birth_date = "no Patient.birthDate" if is_age else ""
    return " and ".join(x for x in (observation, birth_date) if x)


def incomplete(missing: tuple[FeatureSpec, ...], sources: Sources) -> PrefetchIncomplete:
    """The 412 for features the prefetch should have supplied, each one named."""
    return PrefetchIncomplete(
        "the prefetch lacks what the model needs: "
        + ", ".join(f"{f.name} ({_lacks(f, sources)})" for f in missing),
        missing=[f.name for f in missing],
        errors=[{"field": f"prefetch.{f.name}", "message": _lacks(f, sources),
                 "allowed": allowed_of(f)} for f in missing],
    )
