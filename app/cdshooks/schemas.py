"""CDS Hooks 2.0 bodies: the request (only what this service reads is checked strictly), the
discovery document and the cards."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class PatientViewContext(BaseModel):
    """``patient-view`` context: userId and patientId are required, encounterId optional."""

    model_config = ConfigDict(extra="allow")

    userId: str = Field(min_length=1, description="e.g. Practitioner/123")
    patientId: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9\-.]+$")
    encounterId: str | None = None


class HookRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # fhirAuthorization, extension, ... are ignored

    hook: str = Field(min_length=1)
    hookInstance: str = Field(min_length=1)
    fhirServer: str | None = None
    context: PatientViewContext
    prefetch: dict[str, Any] | None = None


class FeatureCode(BaseModel):
    """Where a feature comes from in the prefetch, and the values the model accepts."""

    feature: str
    label: str
    prefetch: str = Field(description="the prefetch key whose resources carry it")
    system: str | None = Field(description="its Observations' code system (null: birthDate only)")
    code: str | None
    display: str | None
    allowed: str


class ServiceExtension(BaseModel):
    model_id: int | None = Field(
        serialization_alias="dev.dpcrisis.model-id",
        description="the active model whose schema this describes; null when none is active "
        "(the built-in crisis schema is described then)",
    )
    feature_codes: list[FeatureCode] = Field(serialization_alias="dev.dpcrisis.feature-codes")
    not_prefetchable: list[str] = Field(
        serialization_alias="dev.dpcrisis.not-prefetchable",
        description="features without a code: no prefetch carries them, so a call answers an "
        "insufficient-data card",
    )


class CdsService(BaseModel):
    hook: str
    id: str
    title: str
    description: str
    prefetch: dict[str, str] = Field(description="key -> FHIR query template")
    usageRequirements: str
    extension: ServiceExtension


class Discovery(BaseModel):
    services: list[CdsService]


class Coding(BaseModel):
    system: str
    code: str
    display: str


class CardSource(BaseModel):
    label: str
    topic: Coding


Indicator = Literal["info", "warning", "critical"]


class Card(BaseModel):
    """An informational card: no suggestions, no links."""

    uuid: str
    summary: str = Field(description="under 140 characters")
    indicator: Indicator = Field(
        description="by band: low -> info, medium -> warning, high -> critical"
    )
    detail: str = Field(description="markdown: probability, reasons and privacy statement")
    source: CardSource


class CdsResponse(BaseModel):
    cards: list[Card]
