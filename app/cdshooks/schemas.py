"""CDS Hooks request body (CDS Hooks 2.0): only what this service reads is checked strictly."""

from typing import Any

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
