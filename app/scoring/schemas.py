"""Risk request and response bodies.

The features are a JSON object here: which names and values are allowed depends on the scoring
model's declared schema, known once the model is resolved (``app.scoring.patients`` checks them
then, each error naming ``features.phq9`` or ``patients.3.features.phq9`` with the allowed
range or categories).
"""

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field

from app.bands import Band
from app.core.ids import MAX_ID
from app.core.schemas import ALLOWED_RANGES, RequestModel, register_ranges
from app.core.validation import stop_early
from app.datasets.schema.built_in_schema import SELF_HARM_FEATURE
from app.privacy.annotations import LEDGER, PUBLIC, Released
from app.privacy.releases import Release

MAX_BATCH = 10_000
"""Patients per batch call: 10,000 score in well under a second on 2 CPU cores."""

PatientFeatures = Annotated[
    dict[str, Any],
    Field(description=(
        "the scoring model's features, by name (GET /v1/features?model_id=... lists them with "
        "their allowed values; the active model's when no model_id is named). The example is a "
        "patient of the built-in synthetic generator's schema; another model's differ"
    ), examples=[{"age": 34, "phq9": 22, "gaf": 45, "num_sessions": 12, "substance_use": 1,
                  SELF_HARM_FEATURE: 1}]),
]


ModelId = Annotated[
    int | None,
    Field(default=None, ge=1, le=MAX_ID,
          description="score with this model; the active one when absent"),
]


TRAINED = Released(Release.DP_TRAINING)
STATEMENT = Released(Release.LEDGER, Release.PUBLIC_BY_CONVENTION, note="a sentence quoting the "
                     "epsilons and the calibration part's row count")
ECHOED = Released(Release.PUBLIC_INPUT, note="the caller's own feature value, echoed (and put in "
                  "words)")
IN_WORDS = Released(Release.PUBLIC_INPUT, note="the caller's own feature value, put in words")
EXPLANATION_NOTE = ("the method follows the public schema's size; the error is the spread of the "
                    "model's own outputs over public coalition orders")
EXPLANATION_ERROR = Released(Release.DP_TRAINING, note=EXPLANATION_NOTE)
EXPLANATION_METHOD = Released(Release.PUBLIC_INPUT, note=EXPLANATION_NOTE)
IMPUTED = Released(Release.PUBLIC_INPUT, note="which of the caller's features the request left "
                   "out, scored at the schema's public reference value")


@register_ranges
class RiskRequest(RequestModel):
    features: PatientFeatures
    model_id: ModelId = None


class BatchPatient(RequestModel):
    id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="your identifier for this patient, echoed in its result",
    )
    features: PatientFeatures


class RiskBatchRequest(RequestModel):
    # stop_early: a batch of bad patients is checked only until an answer's worth of errors.
    patients: Annotated[list[BatchPatient], stop_early(MAX_BATCH)] = Field(
        min_length=1, max_length=MAX_BATCH, description=f"1 to {MAX_BATCH:,} patients"
    )
    model_id: ModelId = None


ALLOWED_RANGES["patients"] = f"[1, {MAX_BATCH}]"


# --------------------------------------------------------------------------- responses (docs)


class SeverityOut(BaseModel):
    label: Annotated[str, PUBLIC]
    from_: Annotated[int | float, PUBLIC] = Field(alias="from")
    to: Annotated[int | float, PUBLIC]


class ContributionOut(BaseModel):
    feature: Annotated[str, PUBLIC]
    label: Annotated[str, PUBLIC]
    value: Annotated[float | str, ECHOED] = Field(
        description="the value sent (a categorical feature's category)")
    contribution: Annotated[float, TRAINED] = Field(
        description="exact Shapley value on the log-odds scale")
    contribution_probability: Annotated[float, TRAINED] = Field(
        description="exact Shapley value on the 0-1 scale")
    direction: Annotated[str, TRAINED] = Field(description="raises | lowers | neutral")
    reason: Annotated[str, ECHOED]
    severity: SeverityOut | None = Field(description="the instrument's published band, if any")
    imputed: Annotated[bool, IMPUTED] = Field(default=False, description=(
        "not given (left out or null): scored at the reference value, as the schema declares for "
        "this feature (missing: reference)"))


IMPUTED_DESCRIPTION = (
    "the features not given (left out or null) and so scored at their reference value, as "
    "the model's schema declares for them (missing: reference), in the schema's order; empty "
    "when every feature was given")


class ExplanationOut(BaseModel):
    method: Annotated[str, EXPLANATION_METHOD] = Field(description=(
        "exact (all coalitions, up to 12 features) | closed-form+sampled (a logistic or "
        "additive model's log-odds exact, probability scale estimated) | sampled (permutation "
        "estimate)"))
    standard_error: Annotated[float, EXPLANATION_ERROR] = Field(
        description="largest standard error of an estimated value")


class ReferenceOut(BaseModel):
    features: Annotated[dict[str, int | float | str], PUBLIC]
    log_odds: Annotated[float, TRAINED]
    probability: Annotated[float, TRAINED]
    note: Annotated[str, PUBLIC]
    explanation: ExplanationOut


class ModelStatementOut(BaseModel):
    id: Annotated[int, PUBLIC]
    version: Annotated[str, TRAINED] = Field(
        description="first 12 hex digits of the artifact's SHA-256")
    kind: Annotated[str, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    trained_at: Annotated[str | None, PUBLIC]
    epsilon: Annotated[float | None, LEDGER]
    delta: Annotated[float, LEDGER]
    accountant: Annotated[str, LEDGER]
    epsilon_rdp: Annotated[float | None, LEDGER]
    non_private: Annotated[bool, LEDGER]
    unit: Annotated[str, PUBLIC]
    calibrated: Annotated[bool, PUBLIC] = Field(
        description="probabilities calibrated on held-out rows (DP Platt scaling, no extra spend)"
    )
    statement: Annotated[str, STATEMENT]


class ScoreOut(BaseModel):
    probability: Annotated[float, TRAINED] = Field(
        description="probability of the model's declared outcome (its schema's outcome.label, "
        "within outcome.horizon_days when declared), 0-1")
    log_odds: Annotated[float, TRAINED]
    band: Annotated[Band, TRAINED] = Field(description="low | medium | high")
    band_thresholds: Annotated[dict[str, float], PUBLIC]
    contributions: list[ContributionOut] = Field(description="largest |contribution| first")
    imputed: Annotated[list[str], IMPUTED] = Field(
        default_factory=list, description=IMPUTED_DESCRIPTION)


class RiskResult(ScoreOut):
    """One patient; log_odds = reference.log_odds + sum of contributions (exactly), and the
    same on the probability scale."""

    reference: ReferenceOut
    model: ModelStatementOut


class BaseValueOut(BaseModel):
    log_odds: Annotated[float, TRAINED]
    probability: Annotated[float, TRAINED]


class ModelRefOut(BaseModel):
    id: Annotated[int, PUBLIC]
    version: Annotated[str, TRAINED]
    epsilon: Annotated[float | None, LEDGER]
    delta: Annotated[float, LEDGER]


class PatientRef(BaseModel):
    id: Annotated[str | None, PUBLIC] = Field(description="the patient's id as sent, or null")


class RiskBatchResult(ScoreOut, PatientRef):
    """One patient of a batch. ``PatientRef`` comes last among the bases so that ``id`` is
    the first field (pydantic orders inherited fields from the last base on), as the answer
    has always written it."""

    reference: BaseValueOut = Field(description="the reference patient's scores")
    model: ModelRefOut


class RiskBatchResponse(BaseModel):
    """The model's full statement and the reference patient once, then one result each."""

    model: ModelStatementOut
    band_thresholds: Annotated[dict[str, float], PUBLIC]
    reference: ReferenceOut
    results: list[RiskBatchResult]


# --------------------------------------------------------------------- the compact batch view


class BatchView(StrEnum):
    """How much of each patient's answer a batch call returns."""

    FULL = "full"
    COMPACT = "compact"


TOP_CONTRIBUTIONS = 3
"""Contributions per patient in the compact view: the largest by |log-odds contribution|."""


class CompactContribution(BaseModel):
    feature: Annotated[str, PUBLIC]
    direction: Annotated[str, TRAINED] = Field(description="raises | lowers | neutral")
    contribution_probability: Annotated[float, TRAINED] = Field(
        description="exact Shapley value on the 0-1 scale")
    reason: Annotated[str, IN_WORDS] = Field(description="the value sent, in words")


class CompactResult(PatientRef):
    probability: Annotated[float, TRAINED] = Field(
        description="probability of the outcome within its horizon, 0-1")
    band: Annotated[Band, TRAINED] = Field(description="low | medium | high")
    contributions: list[CompactContribution] = Field(
        description=f"the {TOP_CONTRIBUTIONS} largest |contribution| first (fewer when the "
        "model has fewer features)")
    imputed: Annotated[list[str], IMPUTED] = Field(
        default_factory=list, description=IMPUTED_DESCRIPTION)


class RiskBatchCompact(BaseModel):
    """``?view=compact``: per patient only the probability, the band and the top
    contributions (about a fifth of the full answer's bytes); the model's statement, the
    thresholds and the reference patient's scores once."""

    model: ModelStatementOut
    band_thresholds: Annotated[dict[str, float], PUBLIC]
    reference: BaseValueOut = Field(description="the reference patient's scores")
    results: list[CompactResult]
