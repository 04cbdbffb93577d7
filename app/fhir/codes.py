"""Code systems the FHIR and CDS Hooks faces use, and how each feature is coded.

Features with a LOINC code use it (age 30525-0, PHQ-9 total score 44261-6). The others have
no LOINC code that means exactly what the model was trained on, so they use this service's
local code system ``FEATURE_SYSTEM`` (its codes are the feature names):

| feature       | system | code          | Observation value                                     |
|---------------|--------|---------------|-------------------------------------------------------|
| age           | LOINC  | 30525-0       | valueQuantity / valueInteger, years (or birthDate)    |
| phq9          | LOINC  | 44261-6       | valueQuantity / valueInteger, 0-27                    |
| gaf           | local  | gaf           | valueQuantity / valueInteger, 1-100                   |
| num_sessions  | local  | num_sessions  | valueQuantity / valueInteger, sessions in 12 months   |
| substance_use | local  | substance_use | valueBoolean, or valueCodeableConcept yes/no          |
| prior_crisis  | local  | prior_crisis  | valueBoolean, or valueCodeableConcept yes/no          |
"""

from dataclasses import dataclass

from app.features import FEATURES, Feature

LOINC = "http://loinc.org"
FEATURE_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/crisis-features"
MODEL_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/model"
BAND_SYSTEM = "https://dpcrisis.dev/fhir/CodeSystem/risk-band"
RISK_PROBABILITY = "http://terminology.hl7.org/CodeSystem/risk-probability"

OUTCOME_TEXT = "mental-health crisis within 30 days"
HORIZON_DAYS = 30


@dataclass(frozen=True)
class FeatureCode:
    feature: Feature
    system: str
    code: str

    @property
    def token(self) -> str:
        """The FHIR search token ``system|code``."""
        return f"{self.system}|{self.code}"


FEATURE_CODES: tuple[FeatureCode, ...] = tuple(
    FeatureCode(f, LOINC, f.loinc) if f.loinc else FeatureCode(f, FEATURE_SYSTEM, f.name)
    for f in FEATURES
)
BY_TOKEN: dict[tuple[str, str], FeatureCode] = {(c.system, c.code): c for c in FEATURE_CODES}
