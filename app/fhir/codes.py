"""Code systems the FHIR and CDS Hooks faces use, and how each feature of a schema is coded.

A feature is coded by the ``code`` its declared schema gives it (system, code, display): the
built-in crisis schema declares LOINC 30525-0 for age and 44261-6 for the PHQ-9 total score. A
feature without a declared code is coded in this service's local code system
``FEATURE_SYSTEM``, its code the feature's name (``...crisis-features|gaf``): that names it
in a RiskAssessment, but no EHR records Observations in it on its own, so CDS Hooks does not
prefetch it (``app.cdshooks.prefetch`` says which features it reads, and the one exception).

The crisis schema as an example:

| feature       | system | code          | CDS Hooks Observation value                          |
|---------------|--------|---------------|------------------------------------------------------|
| age           | LOINC  | 30525-0       | valueQuantity / valueInteger, years (or birthDate)   |
| phq9          | LOINC  | 44261-6       | valueQuantity / valueInteger, 0-27                   |
| gaf           | local  | gaf           | valueQuantity / valueInteger, 1-100                  |
| num_sessions  | local  | num_sessions  | valueQuantity / valueInteger, sessions in 12 months  |
| substance_use | local  | substance_use | valueBoolean, or valueCodeableConcept yes/no         |
| prior_crisis  | local  | prior_crisis  | valueBoolean, or valueCodeableConcept yes/no         |

A categorical feature's value is one of its declared categories: ``valueCodeableConcept``
(a coding's code, or the text) or ``valueString``.
"""

from dataclasses import dataclass

from app.datasets.dataset_schema import LOINC as LOINC  # re-exported with the other systems
from app.datasets.dataset_schema import DatasetSchema, FeatureSpec

AGE_LOINC = "30525-0"
FEATURE_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/crisis-features"
MODEL_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/model"
BAND_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/risk-band"
RISK_PROBABILITY = "http://terminology.hl7.org/CodeSystem/risk-probability"
FEATURE_CODE_EXTENSION = "https://dpcrisis.dev/fhir/StructureDefinition/feature-code"
"""On each RiskAssessment.basis item: the feature's coding (valueCoding)."""
FEATURE_VALUE_EXTENSION = "https://dpcrisis.dev/fhir/StructureDefinition/feature-value"
"""On each RiskAssessment.basis item: the value scored (valueInteger, valueDecimal,
valueBoolean, or valueString for a categorical feature's category)."""

OUTCOME_TEXT = "mental-health crisis within 30 days"
HORIZON_DAYS = 30


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
