"""Risk request bodies, built from the feature spec so bounds live in one place.

Every error about a feature carries the feature's allowed range in its context, so a problem
document names it at any depth (``features.phq9`` for one patient, ``patients.3.features.phq9``
in a batch), including for a missing value or a value of the wrong type.
"""

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.bands import Band
from app.core.ids import MAX_ID
from app.core.schemas import ALLOWED_RANGES, RequestModel, register_ranges
from app.core.validation import stop_early
from app.features import BY_NAME, FEATURE_NAMES, FEATURES

MAX_BATCH = 10_000
"""Patients per batch call: 10,000 score in well under a second on 2 CPU cores."""

_FEATURE_LIST = ", ".join(FEATURE_NAMES)


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


def allowed_range(name: str) -> str:
    """A feature's public range as error bodies show it, e.g. ``[0, 27]``."""
    f = BY_NAME[name]
    return f"[{f.lower:g}, {f.upper:g}]"


def _with_allowed(error: Any) -> InitErrorDetails:
    """The same error, its context carrying the feature's range (or the feature names)."""
    loc = tuple(error["loc"])
    name = str(loc[0]) if loc else ""
    ctx = {k: v for k, v in (error.get("ctx") or {}).items() if k != "error"}
    ctx["allowed"] = allowed_range(name) if name in BY_NAME else f"features: {_FEATURE_LIST}"
    return InitErrorDetails(
        type=PydanticCustomError(error["type"], error["msg"], ctx), loc=loc, input=error["input"]
    )


class _FeaturesBase(RequestModel):
    @model_validator(mode="wrap")
    @classmethod
    def _name_ranges(cls, value: Any, handler: ModelWrapValidatorHandler[BaseModel]) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            errors = [_with_allowed(e) for e in exc.errors()]
            raise ValidationError.from_exception_data(exc.title, errors) from None


def _feature_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in FEATURES:
        kind = Annotated[  # Field first, or the schema shows "ge"/"le", not minimum/maximum
            int,
            Field(ge=f.lower, le=f.upper, description=f"{f.label} ({f.unit})".strip()),
            BeforeValidator(_whole_number),
        ]
        fields[f.name] = (kind, ...)
    return fields


PatientFeatures = create_model(  # type: ignore[call-overload]
    "PatientFeatures", __base__=_FeaturesBase, **_feature_fields()
)

ModelId = Annotated[
    int | None,
    Field(default=None, ge=1, le=MAX_ID,
          description="score with this model; the active one when absent"),
]


@register_ranges
class RiskRequest(RequestModel):
    features: PatientFeatures  # type: ignore[valid-type]
    model_id: ModelId = None


class BatchPatient(RequestModel):
    id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="your identifier for this patient, echoed in its result",
    )
    features: PatientFeatures  # type: ignore[valid-type]


class RiskBatchRequest(RequestModel):
    # stop_early: a batch of bad patients is checked only until an answer's worth of errors.
    patients: Annotated[list[BatchPatient], stop_early(MAX_BATCH)] = Field(
        min_length=1, max_length=MAX_BATCH, description=f"1 to {MAX_BATCH:,} patients"
    )
    model_id: ModelId = None


ALLOWED_RANGES["patients"] = f"[1, {MAX_BATCH}]"


# --------------------------------------------------------------------------- responses (docs)


class SeverityOut(BaseModel):
    label: str
    from_: int | float = Field(alias="from")
    to: int | float


class ContributionOut(BaseModel):
    feature: str
    label: str
    value: float
    contribution: float = Field(description="exact Shapley value on the log-odds scale")
    contribution_probability: float = Field(description="exact Shapley value on the 0-1 scale")
    direction: str = Field(description="raises | lowers | neutral")
    reason: str
    severity: SeverityOut | None = Field(description="the instrument's published band, if any")


class ReferenceOut(BaseModel):
    features: dict[str, int | float]
    log_odds: float
    probability: float
    note: str


class ModelStatementOut(BaseModel):
    id: int
    version: str = Field(description="first 12 hex digits of the artifact's SHA-256")
    kind: str
    dataset_id: int
    trained_at: str | None
    epsilon: float | None
    delta: float
    accountant: str
    epsilon_rdp: float | None
    non_private: bool
    unit: str
    calibrated: bool = Field(
        description="probabilities calibrated on held-out rows (DP Platt scaling, no extra spend)"
    )
    statement: str


class ScoreOut(BaseModel):
    probability: float = Field(description="probability of a crisis within 30 days, 0-1")
    log_odds: float
    band: Band = Field(description="low | medium | high")
    band_thresholds: dict[str, float]
    contributions: list[ContributionOut] = Field(description="largest |contribution| first")


class RiskResult(ScoreOut):
    """One patient; log_odds = reference.log_odds + sum of contributions (exactly), and the
    same on the probability scale."""

    reference: ReferenceOut
    model: ModelStatementOut


class BaseValueOut(BaseModel):
    log_odds: float
    probability: float


class ModelRefOut(BaseModel):
    id: int
    version: str
    epsilon: float | None
    delta: float


class RiskBatchResult(ScoreOut):
    id: str | None = Field(description="the patient's id as sent, or null")
    reference: BaseValueOut = Field(description="the reference patient's scores")
    model: ModelRefOut


class RiskBatchResponse(BaseModel):
    """The model's full statement and the reference patient once, then one result each."""

    model: ModelStatementOut
    band_thresholds: dict[str, float]
    reference: ReferenceOut
    results: list[RiskBatchResult]
