"""Request bodies of the model registry API."""

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app.core.schemas import RequestModel, register_ranges


def _real_number(value: Any) -> Any:
    """Numbers only: "0.1" (a string) and true (a boolean) are the wrong type, not 0.1 and 1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


# Field before the validator: after it, pydantic publishes "gt"/"lt" instead of JSON Schema's
# exclusiveMinimum/exclusiveMaximum, and clients (and the fuzzer) see no bounds at all.
Probability = Annotated[float, Field(gt=0, lt=1), BeforeValidator(_real_number)]


@register_ranges
class BandThresholds(RequestModel):
    """Risk-band cut-offs on the 30-day crisis probability: 0 < low_medium < medium_high < 1."""

    low_medium: Probability = Field(description="probability from which a patient is medium")
    medium_high: Probability = Field(description="probability from which a patient is high")

    @field_validator("medium_high")
    @classmethod
    def _above_low_medium(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("low_medium")
        if low is not None and value <= low:
            raise PydanticCustomError(
                "threshold_order",
                "must be greater than low_medium ({low_medium})",
                {"low_medium": low, "allowed": f"({low:g}, 1)"},
            )
        return value
