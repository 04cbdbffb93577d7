"""Code systems the FHIR and CDS Hooks faces use, and how each feature of a schema is coded.

A feature is coded by the ``code`` its declared schema gives it (system, code, display): the
built-in schema declares LOINC 30525-0 for age and 44261-6 for the PHQ-9 total score. A
feature without a declared code is coded in a local code system of its schema, its code the
feature's name (``local_system``): the built-in schema keeps ``FEATURE_SYSTEM`` (its own,
``app.datasets.schema.built_in_schema``), which EHRs have mapped since the first release; any other
declaration gets ``.../CodeSystem/schema-features-<the first 16 hex digits of its schema
hash>``, the same for every model trained on that declaration, never another's, and served
at that URL (``app.fhir.terminology``). That names the feature in a RiskAssessment, but no EHR
records Observations in it on its own, so CDS Hooks does not prefetch it
(``app.cdshooks.prefetch`` says which features it reads, and the one exception).

What a model predicts is its schema's declared outcome (``outcome_concept``): its coding when
declared, its label as text; nothing here says what that outcome is.

The built-in schema declares where CDS Hooks finds each of its features in an EHR
(``app.datasets.schema.built_in_schema``'s table; ``ehr_sources`` holds that mapping and
``app.cdshooks.prefetch`` reads it). SNOMED CT codes match exactly (no subsumption: there is no
terminology server here); ICD codes match the code and every code below it (``F10`` matches
``F10.20``).

A declared schema's yes/no feature coded in SNOMED CT, ICD-10-CM or ICD-10 is read the same
way, from Conditions (and Encounter reasons) with its code, as well as from Observations.

A categorical feature's value is one of its declared categories: ``valueCodeableConcept``
(a coding's code, or the text) or ``valueString``.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.datasets.schema.built_in_schema import (
    BUILT_IN_SCHEMA,
    LEGACY_BUILT_IN_HASH,
    SELF_HARM_FEATURE,
)
from app.datasets.schema.built_in_schema import FEATURE_SYSTEM as FEATURE_SYSTEM  # the built-in's
from app.datasets.schema.built_in_schema import LOINC as LOINC  # re-exported with the other systems
from app.datasets.schema.built_in_schema import TOPIC_CODE as TOPIC_CODE  # the built-in's
from app.datasets.schema.dataset_schema import (
    DatasetSchema,
    FeatureSpec,
    outcome_words,
    schema_hash,
)

AGE_LOINC = "30525-0"
SCHEMA_FEATURES = "https://dpcrisis.dev/fhir/CodeSystem/schema-features-"
"""Any other declaration's local code system: this, then ``SCHEMA_KEY_DIGITS`` of its hash."""
SCHEMA_KEY_DIGITS = 16
"""64 bits of the schema's SHA-256: FHIR ids are at most 64 characters, so not all 64 digits."""
BUILT_IN_HASHES = frozenset({schema_hash(BUILT_IN_SCHEMA), LEGACY_BUILT_IN_HASH})
MODEL_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/model"
MODEL_ID_SYSTEM = "https://dpcrisis.dev/fhir/sid/model-id"
ARTIFACT_SYSTEM = "https://dpcrisis.dev/fhir/sid/model-artifact-sha256"
BAND_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/risk-band"
TOPIC_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/cds-topic"
"""CDS Hooks card topics (``source.topic``) of outcomes with no code of their own."""
OUTCOME_TOPIC_CODE = "outcome-risk"
"""The topic of a card about an outcome declared without a code: the same for all of them."""
RISK_PROBABILITY = "http://terminology.hl7.org/CodeSystem/risk-probability"
SNOMED = "http://snomed.info/sct"
ICD10CM = "http://hl7.org/fhir/sid/icd-10-cm"
ICD10 = "http://hl7.org/fhir/sid/icd-10"
DIAGNOSIS_SYSTEMS = (SNOMED, ICD10CM, ICD10)
"""Code systems whose codes name diagnoses: a yes/no feature coded in one is a Condition."""
FEATURE_CODE_EXTENSION = "https://dpcrisis.dev/fhir/StructureDefinition/feature-code"
"""On each RiskAssessment.basis item: the feature's coding (valueCoding)."""
FEATURE_VALUE_EXTENSION = "https://dpcrisis.dev/fhir/StructureDefinition/feature-value"
"""On each RiskAssessment.basis item: the value scored (valueInteger, valueDecimal,
valueBoolean, or valueString for a categorical feature's category)."""


@dataclass(frozen=True)
class DiagnosisCode:
    """A diagnosis code a Condition (or an Encounter's reason) is matched against: SNOMED CT
    exactly, ICD codes with every code below them (dots ignored)."""

    system: str
    code: str
    display: str

    @property
    def below(self) -> bool:
        return self.system != SNOMED

    def matches(self, system: object, code: object) -> bool:
        if system != self.system or not isinstance(code, str):
            return False
        if not self.below:
            return code == self.code
        return code.replace(".", "").upper().startswith(self.code.replace(".", "").upper())


def _icd(system: str, codes: str, display: str) -> tuple[DiagnosisCode, ...]:
    return tuple(DiagnosisCode(system, c, display) for c in codes.split())


SUBSTANCE_USE_CODES: tuple[DiagnosisCode, ...] = (
    *_icd(ICD10CM, "F10 F11 F12 F13 F14 F15 F16 F18 F19",
          "Mental and behavioral disorders due to psychoactive substance use"),
    *_icd(ICD10, "F10 F11 F12 F13 F14 F15 F16 F18 F19",
          "Mental and behavioural disorders due to psychoactive substance use"),
    DiagnosisCode(SNOMED, "66214007", "Substance abuse (disorder)"),
    DiagnosisCode(SNOMED, "26416006", "Drug abuse (disorder)"),
    DiagnosisCode(SNOMED, "191816009", "Drug dependence (disorder)"),
    DiagnosisCode(SNOMED, "7200002", "Alcoholism (disorder)"),
    DiagnosisCode(SNOMED, "15167005", "Alcohol abuse (disorder)"),
)
SELF_HARM_CODES: tuple[DiagnosisCode, ...] = (
    DiagnosisCode(ICD10CM, "R45.851", "Suicidal ideations"),
    DiagnosisCode(ICD10CM, "R45.88", "Nonsuicidal self-harm"),
    DiagnosisCode(ICD10CM, "T14.91", "Suicide attempt"),
    *_icd(ICD10CM, " ".join(f"X{n}" for n in range(71, 84)), "Intentional self-harm"),
    DiagnosisCode(ICD10CM, "Z91.5", "Personal history of self-harm"),
    *_icd(ICD10, " ".join(f"X{n}" for n in range(60, 85)), "Intentional self-harm"),
    DiagnosisCode(ICD10, "Z91.5", "Personal history of self-harm"),
    DiagnosisCode(SNOMED, "82313006", "Suicide attempt (event)"),
    DiagnosisCode(SNOMED, "6471006", "Suicidal thoughts (finding)"),
    DiagnosisCode(SNOMED, "248062006", "Self-injurious behavior (finding)"),
)


@dataclass(frozen=True)
class EhrSources:
    """Where an EHR records a schema's features beyond their declared codes, for the schemas
    whose sources this service published itself (today only the built-in generator's, before
    declared codes existed). Outcome-neutral callers ask ``ehr_sources`` by schema hash and
    never test which schema they serve.

    Attributes:
        local_codes: Observations in the schema's local code system (``local_system``) are
            read for its uncoded features.
        diagnoses: yes/no features read from Conditions with these codes, by feature name.
        sessions: the feature counted from Encounters of the last 12 months, if any.
    """

    local_codes: bool = False
    diagnoses: Mapping[str, tuple[DiagnosisCode, ...]] = field(default_factory=dict)
    sessions: str | None = None


NO_EHR_SOURCES = EhrSources()
_EHR_SOURCES = {
    schema_hash(BUILT_IN_SCHEMA): EhrSources(
        local_codes=True,
        diagnoses={"substance_use": SUBSTANCE_USE_CODES, SELF_HARM_FEATURE: SELF_HARM_CODES},
        sessions="num_sessions"),
}


def ehr_sources(schema_digest: str) -> EhrSources:
    """The published EHR sources of the schema with this hash (none for a clinic's own)."""
    return _EHR_SOURCES.get(schema_digest, NO_EHR_SOURCES)


def label_of(feature: FeatureSpec) -> str:
    """What people read for a feature: its label, else its name."""
    return feature.label or feature.name


@dataclass(frozen=True, eq=False)
class FeatureCode:
    """How one feature is coded: its declared code, else the local one."""

    feature: FeatureSpec
    system: str
    code: str
    display: str
    declared: bool  # the schema's own code (False: the schema's local code system)

    @property
    def token(self) -> str:
        """The FHIR search token ``system|code``."""
        return f"{self.system}|{self.code}"


def schema_key(digest: str) -> str:
    """The part of a schema's hash that names its local code system (``SCHEMA_KEY_DIGITS``)."""
    return digest[:SCHEMA_KEY_DIGITS]


def local_system(schema: DatasetSchema) -> str:
    """The code system of the schema's features without a declared code: the published one
    for the built-in schema, else one of the declaration's own."""
    digest = schema_hash(schema)
    return FEATURE_SYSTEM if digest in BUILT_IN_HASHES else SCHEMA_FEATURES + schema_key(digest)


def code_of(feature: FeatureSpec, *, local: str) -> FeatureCode:
    """The feature's declared code, else its name in ``local`` (its schema's ``local_system``)."""
    declared = feature.code
    if declared is not None:
        return FeatureCode(feature, declared.system, declared.code,
                           declared.display or label_of(feature), declared=True)
    return FeatureCode(feature, local, feature.name, label_of(feature), declared=False)


def codes_of(schema: DatasetSchema) -> tuple[FeatureCode, ...]:
    """Every feature's coding, in the schema's order."""
    local = local_system(schema)
    return tuple(code_of(f, local=local) for f in schema.features)


def outcome_concept(schema: DatasetSchema) -> dict[str, Any]:
    """The model's declared outcome as a CodeableConcept: its coding when one is declared, and
    its label (else its column's name) as text."""
    concept: dict[str, Any] = {"text": outcome_words(schema)}
    code = schema.outcome.code
    if code is not None:
        coding = {"system": code.system, "code": code.code,
                  "display": code.display or outcome_words(schema)}
        concept = {"coding": [coding], **concept}
    return concept


@dataclass(frozen=True)
class Topic:
    """A CDS Hooks card topic (``source.topic``), as a coding."""

    system: str
    code: str
    display: str


OUTCOME_TOPIC = Topic(TOPIC_SYSTEM, OUTCOME_TOPIC_CODE, "Risk of a model's declared outcome")


BUILT_IN_TOPIC = Topic(TOPIC_SYSTEM, TOPIC_CODE, f"Risk: {outcome_words(BUILT_IN_SCHEMA)}")
"""The topic EHRs know the built-in schema's cards by; its words are that schema's."""


def topic_of(schema: DatasetSchema) -> Topic:
    """The topic of a card about the schema's outcome: per outcome, never one topic for all.

    EHRs group, filter and count cards by topic, so cards about different outcomes must not
    share one, and one outcome's must keep theirs whichever model or version scored: an
    outcome declared with a code is its topic (that coding); the built-in schema's outcome
    keeps its ``cds-topic`` code (``TOPIC_CODE``), which EHRs have filtered on since the first
    release; an
    outcome declared without a code gets the neutral ``cds-topic|outcome-risk``, which names
    no outcome (the card does).
    """
    code = schema.outcome.code
    built_in = BUILT_IN_SCHEMA.outcome.code
    if code is None:
        return OUTCOME_TOPIC
    if built_in is not None and (code.system, code.code) == (built_in.system, built_in.code):
        return BUILT_IN_TOPIC
    return Topic(code.system, code.code, code.display or outcome_words(schema))
