"""Features a clinic's schema says how to prefetch (a FHIR query and a value path), and sex
from ``Patient.gender``.

A feature declared ``"prefetch": {"query": ..., "path": ...}`` gets its own discovery key (its
name; the Patient's key when the query reads the Patient): its value is the element at
``path`` in the resource of the query's type that the key carries, about this patient (for a
search Bundle, the latest by its effective time; an Observation only when final, amended or
corrected). A key sent without such a resource, or one whose resource lacks the element, is no
data; an element the model cannot use is a 422 naming the feature.

Sex needs no declaration: a categorical feature named ``sex`` or ``gender`` (or coded LOINC
46098-0, 76689-9 or 76691-5) is read from ``Patient.gender`` (``male``/``female`` match a
category of that word or its initial, ``other``/``unknown`` one of that word), and a yes/no
feature named ``male``/``female`` (``is_``, ``sex_`` before it) is 1 for that gender. A gender no
category matches is no data: the card names the feature rather than guess.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.cdshooks.resources import as_object, reference_to, resources_in, when_of
from app.cdshooks.values import EXPECTED, Value, element_value
from app.core.errors import InvalidRequest
from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec
from app.fhir.codes import LOINC, label_of
from app.scoring.patients import allowed_of

USABLE_STATUSES = {"final", "amended", "corrected"}
PATIENT_ELEMENTS = ("subject", "patient", "beneficiary")
"""The elements by which a resource names whose it is."""
SEX_NAMES = {"sex", "gender", "sex_at_birth", "birth_sex", "administrative_sex"}
SEX_LOINC = {"46098-0", "76689-9", "76691-5"}
YES_FOR = {"male": {"male", "is_male", "sex_male"}, "female": {"female", "is_female", "sex_female"}}
"""A yes/no feature's name -> the gender it is yes for."""
GENDER_WORDS = {"male": ("male", "m", "man"), "female": ("female", "f", "woman"),
                "other": ("other",), "unknown": ("unknown",)}
"""FHIR ``Patient.gender`` -> the category texts (any case) it matches."""
_STEP = re.compile(r"([A-Za-z][A-Za-z0-9]*)(?:\[([0-9]+)\])?")


@dataclass(frozen=True, eq=False)
class Declared:
    """A feature read at ``path`` from the ``resource`` its prefetch ``key`` carries."""

    feature: FeatureSpec
    key: str
    resource: str
    path: str
    query: str


def declared_features(features: tuple[FeatureSpec, ...]) -> tuple[Declared, ...]:
    """The schema's features with a declared query (key: the feature's name for now)."""
    found = []
    for f in features:
        spec = f.prefetch
        if spec is not None and spec.query is not None and spec.path is not None:
            found.append(Declared(f, f.name, spec.resource_type or "", spec.path, spec.query))
    return tuple(found)


def sex_feature(features: tuple[FeatureSpec, ...]) -> FeatureSpec | None:
    """The feature read from ``Patient.gender``, unless the schema says how to prefetch it."""
    for f in features:
        if f.prefetch is not None:
            continue
        coded = f.code is not None and f.code.system == LOINC and f.code.code in SEX_LOINC
        if f.kind is FeatureKind.CATEGORICAL and (f.name in SEX_NAMES or coded):
            return f
        if f.kind is FeatureKind.BINARY and any(f.name in names for names in YES_FOR.values()):
            return f
    return None


def value_at(resource: Any, path: str) -> Any:
    """The element at a dotted ``path`` (``a.b[1].c``; a list without an index: its first
    item), or None where the resource has no such element."""
    node = resource
    for step in path.split("."):
        match = _STEP.fullmatch(step)
        if match is None or not isinstance(node, dict):
            return None
        node = node.get(match.group(1))
        index = int(match.group(2)) if match.group(2) is not None else None
        if isinstance(node, list):
            node = node[index or 0] if len(node) > (index or 0) else None
        elif index not in (None, 0):
            return None
    return node


def _about(resource: Mapping[str, Any], kind: str, patient_id: str) -> bool:
    """Whether the resource is this patient's (its id for a Patient, else its subject or
    patient or beneficiary reference; a resource naming none of them is)."""
    if kind == "Patient":
        return resource.get("id") in (None, patient_id)
    refs = [as_object(resource.get(k)).get("reference") for k in PATIENT_ELEMENTS]
    return all(r in (None, f"Patient/{patient_id}", patient_id) for r in refs)


def _resource(prefetch: Mapping[str, Any], d: Declared, patient_id: str
              ) -> dict[str, Any] | None:
    """The latest resource of the declared type about the patient under the feature's key."""
    best: dict[str, Any] | None = None
    for resource in resources_in(prefetch.get(d.key)):
        if resource.get("resourceType") != d.resource or not _about(resource, d.resource,
                                                                       patient_id):
            continue
        if d.resource == "Observation" and resource.get("status", "final") not in USABLE_STATUSES:
            continue
        if best is None or when_of(resource) > when_of(best):
            best = resource
    return best


def read_declared(prefetch: Mapping[str, Any], declared: tuple[Declared, ...], patient_id: str,
                  values: dict[str, Value], references: dict[str, str]) -> None:
    """Each declared feature's value where its key carries one (left out or none: no value).

    Raises:
        InvalidRequest: the element is there but is no value the model can use (422).
    """
    for d in declared:
        resource = _resource(prefetch, d, patient_id)
        raw = None if resource is None else value_at(resource, d.path)
        if resource is None or raw is None:
            continue
        value = element_value(raw, d.feature)
        if value is None:
            raise InvalidRequest(
                f"{d.resource}.{d.path} holds no value {label_of(d.feature)} can take "
                f"({EXPECTED[d.feature.kind]})",
                field=f"prefetch.{d.key}", allowed=allowed_of(d.feature))
        values[d.feature.name] = value
        reference = reference_to(resource)
        if reference is not None:
            references[d.feature.name] = reference


def sex_of(gender: Any, feature: FeatureSpec) -> Value | None:
    """``Patient.gender`` as the sex feature takes it, or None when it matches nothing."""
    if not isinstance(gender, str) or gender not in GENDER_WORDS:
        return None
    if feature.kind is FeatureKind.BINARY:
        if gender not in ("male", "female"):
            return None
        return 1.0 if feature.name in YES_FOR[gender] else 0.0
    words = GENDER_WORDS[gender]
    matches = [c for c in feature.categories or [] if c.strip().casefold() in words]
    return matches[0] if len(matches) == 1 else None


def read_sex(prefetch: Mapping[str, Any], key: str, feature: FeatureSpec, patient_id: str,
             values: dict[str, Value]) -> None:
    """The sex feature from the Patient under ``key`` (a gender no category matches: none)."""
    for resource in resources_in(prefetch.get(key)):
        if resource.get("resourceType") == "Patient" and _about(resource, "Patient",
                                                                 patient_id):
            value = sex_of(resource.get("gender"), feature)
            if value is not None:
                values[feature.name] = value
            return
