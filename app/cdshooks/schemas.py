"""CDS Hooks 2.0 bodies: the request (only what this service reads is checked strictly), the
discovery document and the cards."""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.privacy.annotations import PUBLIC, Released
from app.privacy.releases import Release

TRAINED = Released(Release.DP_TRAINING)
DETAIL = Released(
    Release.DP_TRAINING, Release.PUBLIC_INPUT, Release.LEDGER, Release.PUBLIC_BY_CONVENTION,
    note="the risk and contributions of the caller's patient, with the model's statement")


class PatientViewContext(BaseModel):
    """``patient-view`` context: userId and patientId are required, encounterId optional."""

    model_config = ConfigDict(extra="allow")

    userId: str = Field(min_length=1, description="e.g. Practitioner/123")
    patientId: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9\-.]+$")
    encounterId: str | None = None


MIN_BAND_EXTENSION = "dev.dpcrisis.min-band"
"""A request extension: the lowest band that gets a card in this call (low: every patient)."""


class RequestExtension(BaseModel):
    model_config = ConfigDict(extra="allow")  # other services' extensions are ignored

    min_band: Literal["low", "medium", "high"] | None = Field(
        default=None, alias="dev.dpcrisis.min-band",
        description="the lowest risk band that gets a card in this call; default: the "
        "service's (discovery's dev.dpcrisis.min-band)",
    )


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # fhirAuthorization, ... are ignored

    hook: str = Field(min_length=1)
    hookInstance: str = Field(min_length=1)
    fhirServer: str | None = None
    context: PatientViewContext
    prefetch: dict[str, Any] | None = None
    extension: RequestExtension | None = None


class FeedbackOverride(BaseModel):
    model_config = ConfigDict(extra="allow")

    reason: dict[str, Any] | None = Field(default=None, description="a Coding")
    userComment: str | None = Field(default=None, max_length=2000)


class FeedbackItem(BaseModel):
    """One card's outcome (CDS Hooks 2.0 feedback)."""

    model_config = ConfigDict(extra="allow")

    card: str = Field(min_length=1, max_length=64, description="the card's uuid")
    outcome: Literal["accepted", "overridden"]
    outcomeTimestamp: datetime
    acceptedSuggestions: list[dict[str, Any]] | None = Field(default=None, max_length=100)
    overrideReason: FeedbackOverride | None = None


class FeedbackRequest(BaseModel):
    feedback: list[FeedbackItem] = Field(min_length=1, max_length=100)


class DiagnosisCoding(BaseModel):
    system: Annotated[str, PUBLIC]
    code: Annotated[str, PUBLIC]
    display: Annotated[str, PUBLIC]
    below: Annotated[bool, PUBLIC] = Field(
        description="codes below this one match too (ICD); false: exactly")


class FeatureCode(BaseModel):
    """Where a feature comes from in the prefetch, and the values the model accepts."""

    feature: Annotated[str, PUBLIC]
    label: Annotated[str, PUBLIC]
    prefetch: Annotated[str, PUBLIC] = Field(
        description="the prefetch key whose resources carry it")
    resource: Annotated[str, PUBLIC] = Field(
        description="the FHIR resource type it is read from. Patient: its birthDate or gender (or "
        "the schema's path); Observation: the latest of its code; Condition: yes when one has any "
        "of codes (or an Encounter's reasonCode); Encounter: a count of those in the last 12 "
        "months; any type: the schema's declared query and path")
    path: Annotated[str | None, PUBLIC] = Field(
        default=None, description="the element its value is read from (null: by its code, as "
        "resource says)")
    system: Annotated[str | None, PUBLIC] = Field(
        description="its Observations' code system (null: not read from an Observation of its own "
        "code)")
    code: Annotated[str | None, PUBLIC]
    display: Annotated[str | None, PUBLIC]
    codes: list[DiagnosisCoding] = Field(description="a Condition feature's codes")
    allowed: Annotated[str, PUBLIC]


class ServiceExtension(BaseModel):
    model_id: Annotated[int | None, PUBLIC] = Field(
        serialization_alias="dev.dpcrisis.model-id",
        description="the active model whose schema this describes; null when none is active (the "
        "built-in generator's schema is described then)",
    )
    feature_codes: list[FeatureCode] = Field(serialization_alias="dev.dpcrisis.feature-codes")
    min_band: Annotated[str, PUBLIC] = Field(
        serialization_alias="dev.dpcrisis.min-band",
        description="the lowest risk band that gets a card (lower: no card); a call may ask for "
        "another with the request extension dev.dpcrisis.min-band",
    )
    not_prefetchable: Annotated[list[str], PUBLIC] = Field(
        serialization_alias="dev.dpcrisis.not-prefetchable",
        description="features without a code: no prefetch carries them, so a call answers an "
        "insufficient-data card",
    )


class CdsService(BaseModel):
    hook: Annotated[str, PUBLIC]
    id: Annotated[str, PUBLIC]
    title: Annotated[str, PUBLIC]
    description: Annotated[str, PUBLIC]
    prefetch: Annotated[dict[str, str], PUBLIC] = Field(description="key -> FHIR query template")
    usageRequirements: Annotated[str, PUBLIC]
    extension: ServiceExtension


class Discovery(BaseModel):
    services: list[CdsService]


class Coding(BaseModel):
    system: Annotated[str, PUBLIC]
    code: Annotated[str, PUBLIC]
    display: Annotated[str, PUBLIC]


class CardSource(BaseModel):
    label: Annotated[str, PUBLIC] = Field(description="the model and the outcome it predicts")
    topic: Coding = Field(description="the outcome's coding when it declares one, else a "
                          "cds-topic code: the same for every model of that outcome")


Indicator = Literal["info", "warning", "critical"]


class Card(BaseModel):
    """An informational card: no suggestions, no links."""

    uuid: Annotated[str, PUBLIC]
    summary: Annotated[str, TRAINED] = Field(description="under 140 characters")
    indicator: Annotated[Indicator, TRAINED] = Field(
        description="by band: low -> info, medium -> info, high -> warning (never critical)"
    )
    detail: Annotated[str, DETAIL] = Field(
        description="markdown: probability, the outcome and its window, reasons and privacy "
        "statement")
    source: CardSource


class CdsResponse(BaseModel):
    cards: list[Card]
