"""Features from a CDS Hooks prefetch: the Patient, Observations, Conditions and Encounters.

The service never calls the EHR's FHIR server itself (it holds no credentials for it): what the
model needs must come in ``prefetch``, and what it needs is the scoring model's schema
(``sources_of``), which also gives the discovery document's prefetch templates:

- a feature with a declared code (``app.fhir.codes``) is read from Observations of that
  ``system|code``, found anywhere in the prefetch (a single resource, or the entries of a
  search Bundle); for each feature the latest by ``effectiveDateTime`` (then
  ``effectiveInstant``, ``effectivePeriod.end``/``start``, ``issued``) wins. Observations about
  another patient, or whose status is not final / amended / corrected, are ignored;
- a feature whose schema declares ``prefetch`` is read as it says: an Observation of the
  clinic's own ``system|code``, or the element at a value path of the resource a FHIR query
  returns (``app.cdshooks.declared``);
- age (the numeric or integer feature coded LOINC 30525-0, else the one named ``age``) comes
  from ``Patient.birthDate`` when it is there, else from an Observation of its code; sex (a
  feature named ``sex`` or ``gender``, ...) from ``Patient.gender``;
- yes/no features EHRs keep as diagnoses come from ``Condition`` resources (and ``Encounter``
  reasons), sessions from a count of ``Encounter`` resources (``app.cdshooks.clinical``; the
  codes are the table in ``app.fhir.codes``);
- a feature with neither a code nor a prefetch cannot be prefetched: no EHR records
  Observations in this service's local code system on its own. It is taken from a request
  body only (``/v1/risk``), and a hook call answers an "insufficient data" card naming it.

A schema whose uncoded features had local codes published by this service before schemas
existed (the built-in generator's: ``FEATURE_SYSTEM|gaf``, ...; ``app.fhir.codes.ehr_sources``)
keeps them: such Observations are still read.

What a call lacks is one of two things (``Prefetched``): a feature whose discovery keys were
all left out of the prefetch is *absent* (the EHR could not fetch it and this service cannot
either: 412, as CDS Hooks says); one whose key came as ``null`` or an empty searchset has *no
data* (an "insufficient data" card, 200). A feature the schema declares ``"missing":
"reference"`` is neither: without data (or without a code) it is scored at its reference
value, as training imputed it, and the card says so.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import quote

from app.cdshooks import clinical
from app.cdshooks.declared import Declared, declared_features, read_declared, read_sex, sex_feature
from app.cdshooks.resources import (
    all_resources,
    codings_of,
    is_about,
    when_of,
)
from app.cdshooks.values import EXPECTED, Value, observation_value
from app.core.errors import DomainError, InvalidRequest
from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec
from app.datasets.schema.encoding import Encoder
from app.fhir.codes import (
    AGE_LOINC,
    LOINC,
    FeatureCode,
    code_of,
    ehr_sources,
    label_of,
    local_system,
)
from app.scoring.patients import allowed_of, imputable

USABLE_STATUSES = {"final", "amended", "corrected"}
NUMBERED = (FeatureKind.NUMERIC, FeatureKind.INTEGER)
PATIENT = "Patient/{{context.patientId}}"
SEARCH = "{kind}?patient={{{{context.patientId}}}}"


class PrefetchIncomplete(DomainError):
    """CDS Hooks: 412 when the service cannot get the FHIR data it needs."""

    status, kind, title = 412, "prefetch-incomplete", "Prefetch lacks required data"


@dataclass(frozen=True, eq=False)
class Sources:
    """Where each feature of one schema comes from in a prefetch."""

    features: tuple[FeatureSpec, ...]  # the schema's, in order
    observed: tuple[FeatureCode, ...]  # read from Observations of their code (age too)
    age: FeatureSpec | None  # from Patient.birthDate first
    sex: FeatureSpec | None  # from Patient.gender
    declared: tuple[Declared, ...]  # the schema's own query and value path
    diagnoses: tuple[clinical.DiagnosisFeature, ...]  # from Conditions / Encounter reasons
    sessions: FeatureSpec | None  # a count of Encounters
    unavailable: tuple[FeatureSpec, ...]  # no code: never in a prefetch
    templates: dict[str, str]  # discovery key -> FHIR query
    keys: dict[str, tuple[str, ...]]  # feature name -> the discovery keys that carry it

    @property
    def needed(self) -> tuple[FeatureSpec, ...]:
        """The features a prefetch can supply, in the schema's order."""
        gone = {f.name for f in self.unavailable}
        return tuple(f for f in self.features if f.name not in gone)

    @property
    def blocking(self) -> tuple[FeatureSpec, ...]:
        """The features no prefetch can carry and scoring cannot do without (not imputable)."""
        return tuple(f for f in self.unavailable if not imputable(f))


def _age_feature(features: tuple[FeatureSpec, ...]) -> FeatureSpec | None:
    numbered = [f for f in features if f.kind in NUMBERED]
    coded = [f for f in numbered
             if f.code is not None and (f.code.system, f.code.code) == (LOINC, AGE_LOINC)]
    named = [f for f in numbered if f.name == "age"]
    return next(iter(coded or named), None)


def search_value(text: str) -> str:
    """A token part in a FHIR search: ``\\``, ``|``, ``,`` and ``$`` escaped, then URL-quoted."""
    for special in ("\\", "|", ",", "$"):
        text = text.replace(special, f"\\{special}")
    return quote(text, safe=":/")


def _free(name: str, features: tuple[FeatureSpec, ...]) -> str:
    """``name`` as a discovery key, unless a feature already has that name."""
    return name if name not in {f.name for f in features} else f"{name}_resources"


def _patient_routes(features: tuple[FeatureSpec, ...], age: FeatureSpec | None,
                    sex: FeatureSpec | None, declared: tuple[Declared, ...],
                    templates: dict[str, str], keys: dict[str, list[str]]
                    ) -> tuple[Declared, ...]:
    """The Patient's key (age, sex, declared reads of the Patient) and each other declared
    query's key; the declared features with their keys."""
    patient = _free("patient", features)
    for f in (age, sex):
        if f is not None:
            templates[patient] = PATIENT
            keys[f.name].append(patient)
    routed = []
    for d in declared:
        key = patient if d.query == PATIENT else d.key
        templates[key] = d.query
        keys[d.feature.name].append(key)
        routed.append(Declared(d.feature, key, d.resource, d.path, d.query))
    return tuple(routed)


def _routes(features: tuple[FeatureSpec, ...], observed: tuple[FeatureCode, ...],
            patient: tuple[FeatureSpec | None, FeatureSpec | None, tuple[Declared, ...]],
            diagnoses: tuple[clinical.DiagnosisFeature, ...], sessions: FeatureSpec | None
            ) -> tuple[dict[str, str], dict[str, list[str]], tuple[Declared, ...]]:
    """(discovery key -> template, feature name -> its keys, the declared features with
    their keys); ``patient``: the age and sex features and the declared queries."""
    templates: dict[str, str] = {}
    keys: dict[str, list[str]] = {f.name: [] for f in features}
    age, sex, declared = patient
    declared = _patient_routes(features, age, sex, declared, templates, keys)
    elsewhere = {d.feature.name for d in diagnoses} | ({sessions.name} if sessions else set())
    for c in observed:
        name = c.feature.name
        if name in elsewhere or name in {f.name for f in (age, sex) if f is not None}:
            continue  # from Patient, Conditions or Encounters (Observations read if sent)
        token = f"{search_value(c.system)}|{search_value(c.code)}"
        templates[name] = SEARCH.format(kind="Observation") + f"&code={token}&_sort=-date&_count=1"
        keys[name].append(name)
    encounters = _free("encounters", features) if sessions is not None else None
    if diagnoses:
        conditions = _free("conditions", features)
        templates[conditions] = SEARCH.format(kind="Condition")
        for d in diagnoses:
            keys[d.feature.name] += [conditions, *([encounters] if encounters else [])]
    if sessions is not None and encounters is not None:
        templates[encounters] = SEARCH.format(kind="Encounter")
        keys[sessions.name].append(encounters)
    return templates, keys, declared


_sources: dict[str, Sources] = {}


def _observed_code(f: FeatureSpec, local: str) -> FeatureCode:
    """The Observation code a feature is read by: its prefetch's own code, else its code."""
    spec = f.prefetch
    if spec is not None and spec.system is not None and spec.code is not None:
        return FeatureCode(f, spec.system, spec.code, label_of(f), declared=True)
    return code_of(f, local=local)


def _build(encoder: Encoder, features: tuple[FeatureSpec, ...]) -> Sources:
    legacy = ehr_sources(encoder.hash).local_codes
    local = local_system(encoder.schema)
    declared = declared_features(features)
    queried = {d.feature.name for d in declared}
    observed = tuple(_observed_code(f, local) for f in features if f.name not in queried
                     and (f.code is not None or f.prefetch is not None or legacy))
    age, sex = _age_feature(features), sex_feature(features)
    age = None if age is not None and age.name in queried else age
    diagnoses = clinical.diagnosis_features(encoder)
    sessions = clinical.session_feature(encoder)
    templates, keys, declared = _routes(features, observed, (age, sex, declared), diagnoses,
                                        sessions)
    unavailable = tuple(f for f in features if not keys[f.name]
                        and f.name not in {c.feature.name for c in observed})
    return Sources(features, observed, age, sex, declared, diagnoses, sessions, unavailable,
                   templates, {name: tuple(k) for name, k in keys.items()})


def sources_of(encoder: Encoder) -> Sources:
    """Where the features of ``encoder``'s schema come from (built once per schema)."""
    found = _sources.get(encoder.hash)
    if found is None:
        features = tuple(encoder.schema.features)
        found = _sources[encoder.hash] = _build(encoder, features)
    return found


def _age_from_patient(prefetch: Mapping[str, Any], patient_id: str, today: date) -> float | None:
    for resource in all_resources(prefetch, "Patient"):
        if resource.get("id") not in (None, patient_id):
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
    for resource in all_resources(prefetch, "Observation"):
        status = resource.get("status", "final")
        if status not in USABLE_STATUSES or not is_about(resource, patient_id):
            continue
        codes = [c for coding in codings_of(resource.get("code"))
                 for c in by_token.get((str(coding.get("system")),
                                        str(coding.get("code"))), [])]
        when = when_of(resource)
        for c in codes:
            name = c.feature.name
            if name not in latest or when > latest[name][0]:
                latest[name] = (when, resource, c)
    return {name: (resource, c) for name, (_, resource, c) in latest.items()}


@dataclass(frozen=True)
class Prefetched:
    values: dict[str, Value]
    references: dict[str, str]  # feature name -> "Observation/<id>" (or Condition, Encounter)
    missing: tuple[FeatureSpec, ...]  # prefetchable, sent as null or empty: no data
    absent: tuple[FeatureSpec, ...]  # prefetchable, every key left out: not retrieved
    imputed: tuple[FeatureSpec, ...] = ()  # imputable, no value either way: the reference


def _observed(prefetch: Mapping[str, Any], sources: Sources, patient_id: str,
              values: dict[str, Value], references: dict[str, str]) -> None:
    """Each observed feature's value from its latest Observation (age: birthDate first)."""
    for name, (resource, code) in _latest(prefetch, sources, patient_id).items():
        if name in values:
            continue
        value = observation_value(resource, code.feature)
        if value is None:
            raise InvalidRequest(
                f"the latest {label_of(code.feature)} Observation ({code.token}) has no value "
                f"the model can use ({EXPECTED[code.feature.kind]})",
                field=f"prefetch.{name}", allowed=allowed_of(code.feature),
            )
        values[name] = value
        if isinstance(resource.get("id"), str):
            references[name] = f"Observation/{resource['id']}"


def _clinical(prefetch: Mapping[str, Any], sources: Sources, patient_id: str, today: date,
              values: dict[str, Value], references: dict[str, str]) -> None:
    """Diagnoses (a yes from a Condition wins over an Observation's no) and sessions (an
    Observation's explicit count wins over counted Encounters), where their keys were sent."""
    for d in sources.diagnoses:
        name = d.feature.name
        yes, reference = clinical.diagnosed(prefetch, patient_id, d.codes)
        if yes:
            values[name] = 1.0
            if reference is not None:
                references[name] = reference
        elif name not in values and any(k in prefetch for k in sources.keys[name]):
            values[name] = 0.0
    s = sources.sessions
    if s is not None and s.name not in values and any(k in prefetch for k in sources.keys[s.name]):
        values[s.name] = clinical.sessions(prefetch, patient_id, today, s)


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
    if sources.sex is not None:
        read_sex(prefetch, sources.keys[sources.sex.name][0], sources.sex, patient_id, values)
    read_declared(prefetch, sources.declared, patient_id, values, references)
    _observed(prefetch, sources, patient_id, values, references)
    _clinical(prefetch, sources, patient_id, today, values, references)
    lacking = [f for f in sources.needed if f.name not in values]
    imputed = tuple(f for f in lacking if imputable(f))
    lacking = [f for f in lacking if not imputable(f)]
    sent = [f for f in lacking if any(k in prefetch for k in sources.keys[f.name])]
    absent = tuple(f for f in lacking if f not in sent)
    return Prefetched(values, references, tuple(sent), absent, imputed)


def _lacks(feature: FeatureSpec, sources: Sources) -> str:
    code = next((c for c in sources.observed if c.feature.name == feature.name), None)
    parts = [f"no usable {label_of(feature)} Observation ({code.token})"] if code else []
    if sources.age is not None and feature.name == sources.age.name:
        parts.append("no Patient.birthDate")
    keys = sources.keys[feature.name]
    if keys:
        parts.append("no prefetch key " + " or ".join(repr(k) for k in keys))
    return " and ".join(parts)


def incomplete(absent: tuple[FeatureSpec, ...], sources: Sources) -> PrefetchIncomplete:
    """The 412 for features whose prefetch keys were all left out, each one named."""
    return PrefetchIncomplete(
        "the prefetch lacks what the model needs: "
        + ", ".join(f"{f.name} ({_lacks(f, sources)})" for f in absent),
        missing=[f.name for f in absent],
        errors=[{"field": f"prefetch.{f.name}", "message": _lacks(f, sources),
                 "allowed": allowed_of(f)} for f in absent],
    )
