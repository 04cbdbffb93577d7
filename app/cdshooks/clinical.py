"""Features EHRs keep as diagnoses and visits, not as Observations: yes/no features from
``Condition`` resources (and ``Encounter`` reasons), a count of sessions from ``Encounter``s.

Which features these are, and with which codes, is the table in ``app.fhir.codes``. Absence is
an answer here: when the EHR sent the conditions (or encounters) key and it holds no matching
resource (an empty searchset, or ``null``: CDS Hooks' "no data"), the feature is no (0
sessions), as every EHR-based risk score reads a record. Only a key the EHR left out says
nothing (``app.cdshooks.prefetch`` decides what that means).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from app.cdshooks.resources import (
    all_resources,
    as_object,
    codings_of,
    is_about,
    parse_time,
    reference_to,
)
from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec
from app.datasets.schema.encoding import Encoder
from app.fhir.codes import DIAGNOSIS_SYSTEMS, DiagnosisCode, ehr_sources, label_of

NOT_RECORDED = {"refuted", "entered-in-error"}  # Condition.verificationStatus
DID_NOT_HAPPEN = {"planned", "cancelled", "entered-in-error"}  # Encounter.status
WINDOW_DAYS = 365
"""Sessions are counted over the 365 days before the call (the feature's "last 12 months")."""


@dataclass(frozen=True, eq=False)
class DiagnosisFeature:
    """A yes/no feature read from Conditions (and Encounter reasons) with one of ``codes``."""

    feature: FeatureSpec
    codes: tuple[DiagnosisCode, ...]


def diagnosis_features(encoder: Encoder) -> tuple[DiagnosisFeature, ...]:
    """The diagnoses the service published for the schema (``app.fhir.codes.ehr_sources``),
    and any yes/no feature whose declared code is in SNOMED CT, ICD-10-CM or ICD-10."""
    published = ehr_sources(encoder.hash).diagnoses
    found = []
    for f in encoder.schema.features:
        if f.name in published:
            found.append(DiagnosisFeature(f, published[f.name]))
        elif (f.kind is FeatureKind.BINARY and f.code is not None
              and f.code.system in DIAGNOSIS_SYSTEMS):
            display = f.code.display or label_of(f)
            found.append(DiagnosisFeature(f, (DiagnosisCode(f.code.system, f.code.code,
                                                            display),)))
    return tuple(found)


def session_feature(encoder: Encoder) -> FeatureSpec | None:
    """The feature the service published as a count of Encounters in the last 12 months
    (``app.fhir.codes.ehr_sources``), if the schema has one."""
    name = ehr_sources(encoder.hash).sessions
    return next((f for f in encoder.schema.features if f.name == name), None)


def _coded(concepts: Any, codes: tuple[DiagnosisCode, ...]) -> bool:
    concepts = concepts if isinstance(concepts, list) else [concepts]
    return any(code.matches(c.get("system"), c.get("code"))
               for concept in concepts for c in codings_of(concept) for code in codes)


def _recorded(condition: Mapping[str, Any]) -> bool:
    status = {str(c.get("code")) for c in codings_of(condition.get("verificationStatus"))}
    return not status & NOT_RECORDED


def _happened(encounter: Mapping[str, Any]) -> bool:
    return encounter.get("status") not in DID_NOT_HAPPEN


def diagnosed(prefetch: Mapping[str, Any], patient_id: str,
              codes: tuple[DiagnosisCode, ...]) -> tuple[bool, str | None]:
    """(whether the patient has a recorded Condition, or an Encounter with a reason, coded
    with one of ``codes``; the first such resource's reference)."""
    for condition in all_resources(prefetch, "Condition"):
        if (is_about(condition, patient_id) and _recorded(condition)
                and _coded(condition.get("code"), codes)):
            return True, reference_to(condition)
    for encounter in all_resources(prefetch, "Encounter"):
        if (is_about(encounter, patient_id) and _happened(encounter)
                and _coded(encounter.get("reasonCode"), codes)):
            return True, reference_to(encounter)
    return False, None


def _started(encounter: Mapping[str, Any]) -> datetime | None:
    period = as_object(encounter.get("period"))
    return parse_time(period.get("start")) or parse_time(period.get("end"))


def sessions(prefetch: Mapping[str, Any], patient_id: str, today: date,
             feature: FeatureSpec) -> float:
    """Encounters of the patient that took place in the ``WINDOW_DAYS`` before ``today``
    (by ``period.start``, else ``period.end``; one without either is not counted), capped at
    the feature's public upper bound."""
    end = datetime.combine(today + timedelta(days=1), time.min, tzinfo=UTC)
    start = end - timedelta(days=WINDOW_DAYS + 1)
    seen: set[str] = set()
    count = 0
    for encounter in all_resources(prefetch, "Encounter"):
        when = _started(encounter)
        if (when is None or not start <= when < end or not _happened(encounter)
                or not is_about(encounter, patient_id)):
            continue
        ref = reference_to(encounter)
        if ref is not None and ref in seen:
            continue  # the same Encounter under two keys counts once
        seen.add(ref or f"#{count}")
        count += 1
    upper = feature.upper if feature.upper is not None else float(count)
    return float(min(count, upper))
