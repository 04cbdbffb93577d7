"""Code systems the FHIR and CDS Hooks faces use, and how each feature of a schema is coded.

A feature is coded by the ``code`` its declared schema gives it (system, code, display): the
built-in crisis schema declares LOINC 30525-0 for age and 44261-6 for the PHQ-9 total score. A
feature without a declared code is coded in this service's local code system
``FEATURE_SYSTEM``, its code the feature's name (``...crisis-features|gaf``): that names it
in a RiskAssessment, but no EHR records Observations in it on its own, so CDS Hooks does not
prefetch it (``app.cdshooks.prefetch`` says which features it reads, and the one exception).

The crisis schema as an example, and where CDS Hooks finds each feature in an EHR (the one
table of the mapping; ``app.cdshooks.prefetch`` reads it):

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
|               |                | 82313006, 6471006 or 248062006 (PRIOR_CRISIS_CODES), or an |
|               |                | Encounter with such a reasonCode: yes; none: no            |

The local codes (``FEATURE_SYSTEM|gaf``, ...) are still read from Observations anywhere in the
prefetch, as before: an Observation's explicit count wins over counted Encounters, and a yes
from an Observation or a Condition is a yes. F17 (nicotine) is left out of substance use on
purpose. SNOMED CT codes match exactly (no subsumption: there is no terminology server here);
ICD codes match the code and every code below it (``F10`` matches ``F10.20``).

A declared schema's yes/no feature coded in SNOMED CT, ICD-10-CM or ICD-10 is read the same
way, from Conditions (and Encounter reasons) with its code, as well as from Observations.

A categorical feature's value is one of its declared categories: ``valueCodeableConcept``
(a coding's code, or the text) or ``valueString``.
"""

from dataclasses import dataclass

from app.datasets.dataset_schema import LOINC as LOINC  # re-exported with the other systems
from app.datasets.dataset_schema import DatasetSchema, FeatureSpec

AGE_LOINC = "30525-0"
FEATURE_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/crisis-features"
MODEL_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/model"
MODEL_ID_SYSTEM = "https://dpcrisis.dev/fhir/sid/model-id"
ARTIFACT_SYSTEM = "https://dpcrisis.dev/fhir/sid/model-artifact-sha256"
BAND_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/risk-band"
TOPIC_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/cds-topic"
"""CDS Hooks card topics (``source.topic``): stable across models and their versions."""
TOPIC_CODE = "crisis-risk-30d"
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

OUTCOME_TEXT = "mental-health crisis within 30 days"
HORIZON_DAYS = 30


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
PRIOR_CRISIS_CODES: tuple[DiagnosisCode, ...] = (
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
    declared: bool  # the schema's own code (False: the local FEATURE_SYSTEM code)

    @property
    def token(self) -> str:
        """The FHIR search token ``system|code``."""
        return f"{self.system}|{self.code}"


def code_of(feature: FeatureSpec) -> FeatureCode:
    declared = feature.code
    if declared is not None:
        return FeatureCode(feature, declared.system, declared.code,
                           declared.display or label_of(feature), declared=True)
    return FeatureCode(feature, FEATURE_SYSTEM, feature.name, label_of(feature), declared=False)


def codes_of(schema: DatasetSchema) -> tuple[FeatureCode, ...]:
    """Every feature's coding, in the schema's order."""
    return tuple(code_of(f) for f in schema.features)
