"""The built-in generator's schema: ``app.features`` written as a declared schema.

It is one example of a declared schema, and the only place the crisis outcome is worded (its
label, horizon, coding and bands, and the identifiers the first release published for it:
``FEATURE_SYSTEM``, ``TOPIC_CODE``, ``LEGACY_SERVICE_ID``); every output reads a model's own
schema, so a clinic's model of another outcome never shows these words.

Where CDS Hooks finds each of its features in an EHR (``app.fhir.codes.ehr_sources`` holds the
mapping; ``app.cdshooks.prefetch`` reads it):

| feature       | coded as       | CDS Hooks prefetch key: the FHIR resources read            |
|---------------|----------------|------------------------------------------------------------|
| age           | LOINC 30525-0  | patient: Patient.birthDate (or an Observation 30525-0)     |
| phq9          | LOINC 44261-6  | phq9: the latest Observation 44261-6, valueQuantity 0-27   |
| gaf           | local gaf      | gaf: the latest Observation local gaf, 1-100               |
| num_sessions  | local          | encounters: the Encounters that took place (not planned,   |
|               | num_sessions   | cancelled or entered-in-error) in the 365 days before the  |
|               |                | call, counted; capped at the feature's upper bound (50)    |
| substance_use | local          | conditions: any Condition (not refuted / entered-in-error) |
|               | substance_use  | coded ICD-10-CM or ICD-10 F10-F16, F18, F19 (or a code     |
|               |                | below them), SNOMED CT 66214007, 26416006, 191816009,      |
|               |                | 7200002 or 15167005 (SUBSTANCE_USE_CODES): yes; none: no   |
| prior_crisis  | local          | conditions: any Condition coded ICD-10-CM R45.851, R45.88, |
|               | prior_crisis   | T14.91, X71-X83, Z91.5; ICD-10 X60-X84, Z91.5; SNOMED CT   |
|               |                | 82313006, 6471006 or 248062006 (SELF_HARM_CODES), or an    |
|               |                | Encounter with such a reasonCode: yes; none: no            |

The local codes (``FEATURE_SYSTEM|gaf``, ...) are still read from Observations anywhere in the
prefetch, as before: an Observation's explicit count wins over counted Encounters, and a yes
from an Observation or a Condition is a yes. F17 (nicotine) is left out of substance use on
purpose.
"""

from app.datasets.schema.dataset_schema import (
    Attribute,
    Code,
    DatasetSchema,
    FeatureSpec,
    Outcome,
    OutcomeBands,
    schema_hash,
)
from app.features import FEATURES, Feature


def _crisis_feature(f: Feature) -> FeatureSpec:
    spec: dict[str, object] = {
        "name": f.name, "label": f.label, "kind": f.kind, "unit": f.unit or None,
        "reference": f.reference,
    }
    if f.kind == "integer":
        spec |= {"lower": f.lower, "upper": f.upper, "model_upper": f.model_upper}
    if f.severities:
        spec["severity_bands"] = [
            {"from": s.lower, "to": s.upper, "label": s.label} for s in f.severities
        ]
    if f.loinc:
        spec["code"] = {"system": LOINC, "code": f.loinc, "display": LOINC_DISPLAY[f.loinc]}
    return FeatureSpec.model_validate(spec)


SEX_CATEGORIES = ("female", "male")
"""The built-in generator's subgroup attribute, in the order it draws them."""

LOINC = "http://loinc.org"
LOINC_DISPLAY = {
    "30525-0": "Age",
    "44261-6": "Patient Health Questionnaire 9 item (PHQ-9) total score [Reported]",
}

BUILT_IN_SCHEMA = DatasetSchema(
    features=[_crisis_feature(f) for f in FEATURES],
    outcome=Outcome(
        name="crisis_30d", label="Crisis within 30 days", positive=1,
        horizon_days=30,
        code=Code(system="https://dpcrisis.dev/fhir/CodeSystem/crisis-outcome",
                  code="crisis-30d", display="Mental-health crisis within 30 days"),
        description="A mental-health crisis (emergency presentation, crisis-team contact or "
                    "self-harm) within 30 days of the assessment; the seed article's generator.",
        bands=OutcomeBands(low_medium=0.05, medium_high=0.20),
    ),
    attributes=[Attribute(name="sex", label="Sex", categories=list(SEX_CATEGORIES))],
    subgroups=["sex"],
)
"""The built-in generator's schema (``app.features`` as a declaration). ``sex`` is a
subgroup-only attribute: the generator draws it apart from the outcome and the model never sees
it. The generator's age-band subgroup needs public bins on an integer feature, which this
contract does not have yet; its ids are the generated table's indices, so no ``id_column``."""

LEGACY_BUILT_IN_HASH = schema_hash(BUILT_IN_SCHEMA.model_copy(update={"outcome": Outcome(
    name="crisis_30d", label="Crisis within 30 days", positive=1)}))
"""The crisis schema's hash before its outcome declared a horizon, code and bands: models and
datasets of the generator stored then carry it, and read as ``BUILT_IN_SCHEMA``."""

FEATURE_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/crisis-features"
"""This schema's local code system (its features without a declared code), which EHRs have
mapped since the first release (``app.fhir.codes.local_system``)."""
FEATURE_SYSTEM_NAME = "DpcrisisCrisisFeatures"
"""That CodeSystem's ``name`` as served since the first release (``app.fhir.terminology``)."""
TOPIC_CODE = "crisis-risk-30d"
"""The CDS Hooks card topic of this schema's outcome, which EHRs have filtered on since the
first release (``app.fhir.codes.topic_of``)."""
LEGACY_SERVICE_ID = "dpcrisis-crisis-risk"
"""The CDS service id the first release listed for this schema's outcome
(``app.cdshooks.service.LEGACY_SERVICE_IDS``)."""
SELF_HARM_FEATURE = "prior_crisis"
"""The feature read from self-harm diagnoses (``app.fhir.codes.SELF_HARM_CODES``)."""
