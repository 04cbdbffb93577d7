"""Risk request bodies, built from the feature spec so bounds live in one place."""

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, create_model

from app.core.schemas import RequestModel, register_ranges
from app.features import FEATURES


def _whole_number(value: Any) -> Any:
    """Accept 22 or 22.0; reject 22.5, strings and booleans as the wrong type."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("must be a finite number")
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


def _feature_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in FEATURES:
        kind = Annotated[
            int,
            BeforeValidator(_whole_number),
            Field(ge=f.lower, le=f.upper, description=f"{f.label} ({f.unit})".strip()),
        ]
        fields[f.name] = (kind, ...)
    return fields


PatientFeatures = create_model(  # type: ignore[call-overload]
    "PatientFeatures", __base__=RequestModel, **_feature_fields()
)


@register_ranges
class RiskRequest(RequestModel):
    features: PatientFeatures  # type: ignore[valid-type]
    model_id: int | None = Field(default=None, ge=1)
