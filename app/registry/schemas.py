"""Request and response bodies of the model registry API."""

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from app import bands
from app.core.errors import InvalidRequest
from app.core.schemas import Page, RequestModel, ResponseModel, UtcDatetime, register_ranges
from app.datasets.schema.dataset_schema import DatasetSchema
from app.jobs.results import ServedEvaluation
from app.privacy.annotations import LEDGER, PUBLIC, Released
from app.privacy.releases import Release


def _real_number(value: Any) -> Any:
    """Numbers only: "0.1" (a string) and true (a boolean) are the wrong type, not 0.1 and 1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


# Field before the validator: after it, pydantic publishes "gt"/"lt" instead of JSON Schema's
# exclusiveMinimum/exclusiveMaximum, and clients (and the fuzzer) see no bounds at all.
Probability = Annotated[float, Field(gt=0, lt=1), BeforeValidator(_real_number)]


TRAINED = Released(Release.DP_TRAINING)
STATEMENT = Released(Release.LEDGER, Release.PUBLIC_BY_CONVENTION, note="a sentence quoting the "
                     "epsilons and the calibration part's row count")


@register_ranges
class BandThresholds(RequestModel):
    """Risk-band cut-offs on the probability of the model's declared outcome:
    0 < low_medium < medium_high < 1 (a model starts with its schema's ``outcome.bands``)."""

    low_medium: Probability = Field(description="probability from which a patient is medium")
    medium_high: Probability = Field(description="probability from which a patient is high")

    @field_validator("medium_high")
    @classmethod
    def _above_low_medium(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("low_medium")
        if low is None:
            return value
        try:  # the rule lives in app.bands; this only words its refusal for the request model
            bands.validate_thresholds({bands.LOW_MEDIUM: low, bands.MEDIUM_HIGH: value})
        except InvalidRequest:
            raise PydanticCustomError(
                "threshold_order",
                "must be greater than low_medium ({low_medium})",
                {"low_medium": low, "allowed": f"({low:g}, 1)"},
            ) from None
        return value


class PrivacyStatementOut(ResponseModel):
    """A model's (epsilon, delta) guarantee; every score it gives repeats it."""

    epsilon: Annotated[float | None, LEDGER] = Field(
        description="the PLD accountant's figure (accountant: prv, the old name of pld), or RDP's "
        "where PLD has none (accountant: rdp, a hyper-parameter search); null: trained without DP")
    delta: Annotated[float, LEDGER]
    accountant: Annotated[str, LEDGER]
    epsilon_rdp: Annotated[float | None, LEDGER]
    non_private: Annotated[bool, LEDGER]
    unit: Annotated[str, PUBLIC] = Field(
        default="record (one patient)", description="what the guarantee protects")
    calibrated: Annotated[bool, PUBLIC] = Field(
        description="probabilities calibrated on held-out rows (DP Platt scaling, no extra spend)"
    )
    statement: Annotated[str, STATEMENT] = Field(description="the guarantee in one sentence")


class ModelOut(ResponseModel):
    """A trained model, built from its row by ``registry.service.describe``."""

    id: Annotated[int, PUBLIC]
    version: Annotated[str, TRAINED] = Field(
        description="first 12 hex digits of the artifact's SHA-256")
    active: Annotated[bool, PUBLIC] = Field(
        description="the model scoring uses when no model_id is named")
    job_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    kind: Annotated[str, PUBLIC]
    artifact_sha256: Annotated[str, TRAINED]
    features: Annotated[list[str], PUBLIC] = Field(validation_alias="feature_names")
    model_schema: DatasetSchema = Field(
        serialization_alias="schema",
        description="the declared schema it was trained on: the features it scores",
    )
    schema_hash: Annotated[str, PUBLIC]
    privacy: PrivacyStatementOut
    metrics: ServedEvaluation = Field(
        description="held-out metrics: the evaluation's DP release and the calibration record")
    band_thresholds: Annotated[dict[str, float], PUBLIC]
    created_at: Annotated[UtcDatetime, PUBLIC]
    training_rows_erased_at: Annotated[UtcDatetime | None, PUBLIC] = Field(
        default=None,
        description="when the training dataset's rows were erased (null: they were not); the model "
        "is a DP release of them and stays in use under its guarantee")


class ModelPage(Page[ModelOut]):
    active_model_id: Annotated[int | None, PUBLIC]


class ActivationOut(ResponseModel):
    """One step of the activation history: auto, activate or rollback."""

    seq: Annotated[int, PUBLIC]
    action: Annotated[str, PUBLIC]
    model_id: Annotated[int, PUBLIC]
    previous_model_id: Annotated[int | None, PUBLIC]
    activated_at: Annotated[UtcDatetime, PUBLIC] = Field(validation_alias="created_at")


class ActivationPage(Page[ActivationOut]):
    pass


class ActivationChange(ResponseModel):
    """The model now active, and the history step written (null: it already was active)."""

    model: ModelOut
    activation: ActivationOut | None
