"""The FHIR risk request: the ``/v1/risk`` body plus who it is about."""

from typing import Annotated, Literal

from pydantic import Field

from app.core.schemas import ALLOWED_RANGES, register_ranges
from app.features import FEATURE_NAMES
from app.scoring.schemas import RiskRequest

SUBJECT_PATTERN = r"^(Patient|Group)/[A-Za-z0-9\-.]{1,64}$"
OBSERVATION_PATTERN = r"^Observation/[A-Za-z0-9\-.]{1,64}$"

ObservationRef = Annotated[str, Field(pattern=OBSERVATION_PATTERN)]
FeatureName = Literal[FEATURE_NAMES]  # type: ignore[valid-type]


@register_ranges
class RiskFhirRequest(RiskRequest):
    subject: str | None = Field(
        default=None, pattern=SUBJECT_PATTERN,
        description="FHIR reference to the patient, e.g. Patient/123",
    )
    basis: dict[FeatureName, ObservationRef] | None = Field(
        default=None,
        description="feature name -> the Observation its value came from, e.g. "
        '{"phq9": "Observation/abc"}',
    )


ALLOWED_RANGES["subject"] = "Patient/<id> or Group/<id> (id: 1-64 of A-Z a-z 0-9 - .)"
