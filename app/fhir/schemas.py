"""The FHIR risk request: the ``/v1/risk`` body plus who it is about.

``basis`` keys are the scoring model's feature names; like the features, they are checked once
the model is resolved (``app.fhir.service.assess``).
"""

from typing import Annotated

from pydantic import Field

from app.core.schemas import ALLOWED_RANGES, register_ranges
from app.datasets.schema.dataset_schema import MAX_FEATURES
from app.scoring.schemas import RiskRequest

SUBJECT_PATTERN = r"^(Patient|Group)/[A-Za-z0-9\-.]{1,64}$"
OBSERVATION_PATTERN = r"^Observation/[A-Za-z0-9\-.]{1,64}$"

ObservationRef = Annotated[str, Field(pattern=OBSERVATION_PATTERN)]


@register_ranges
class RiskFhirRequest(RiskRequest):
    subject: str | None = Field(
        default=None, pattern=SUBJECT_PATTERN,
        description="FHIR reference to the patient, e.g. Patient/123",
    )
    basis: dict[str, ObservationRef] | None = Field(
        default=None, max_length=MAX_FEATURES,
        description="the scoring model's feature name -> the Observation its value came from, "
        'e.g. {"phq9": "Observation/abc"}',
    )


ALLOWED_RANGES["subject"] = "Patient/<id> or Group/<id> (id: 1-64 of A-Z a-z 0-9 - .)"
