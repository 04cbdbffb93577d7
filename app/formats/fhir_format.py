"""``application/fhir+json``: one patient's answer as a FHIR R4 ``RiskAssessment`` (never
stored, no subject: ``POST /v1/risk/fhir`` takes a subject and the Observations' references)."""

import json
from datetime import UTC, datetime
from typing import Any

from app.datasets.schema.dataset_schema import FeatureKind
from app.fhir import service as fhir_service
from app.formats.base import Format
from app.scoring import model_cache
from app.scoring.answer import RiskAnswer

MEDIA_TYPE = "application/fhir+json"
ABOUT = "a FHIR R4 RiskAssessment of the one patient"


def _features(answer: RiskAnswer) -> dict[str, Any]:
    """The scored values by feature name, as a request gives them (a category by its name)."""
    values: dict[str, Any] = {}
    for feature, value in zip(answer.encoder.schema.features, answer.raw[0], strict=True):
        if feature.kind is FeatureKind.CATEGORICAL:
            values[feature.name] = (feature.categories or [])[int(value)]
        elif feature.kind is FeatureKind.NUMERIC:
            values[feature.name] = value
        else:
            values[feature.name] = int(value)
    return values


def single(answer: RiskAnswer) -> bytes:
    resource = fhir_service.risk_assessment(
        scored=answer.single(), model=model_cache.resolve(answer.model.id), subject=None,
        features=_features(answer), references=None, now=datetime.now(UTC))
    return json.dumps(resource, ensure_ascii=False, separators=(",", ":")).encode()


FORMAT = Format(MEDIA_TYPE, single, None, ABOUT, order=10)
