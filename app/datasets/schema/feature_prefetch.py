"""Where an EHR keeps a feature, as a schema declares it for CDS Hooks (``FeatureSpec.prefetch``).

A clinic's own features are rarely Observations in a standard code system, so a feature may say
how to fetch it: a FHIR query about the patient and the path of the value in the resource it
returns (``{"query": "Patient/{{context.patientId}}", "path": "gender"}``), or an Observation
code of the clinic's own code system (``{"system": "https://clinic.example/codes", "code":
"bmi"}``). The query becomes the feature's discovery prefetch template, so it may name only
the patient (``{{context.patientId}}``): the EHR fills that in, and nothing else.
"""

import re
from typing import Annotated

from pydantic import Field, model_validator

from app.core.schemas import RequestModel
from app.privacy.annotations import Released
from app.privacy.releases import Release

PATIENT_TOKEN = "{{context.patientId}}"
QUERY_PATTERN = r"^[A-Z][A-Za-z]{1,63}(/\{\{context\.patientId\}\}|\?[!-~]*)$"
"""A resource type, then its read by the patient's id, or a search (printable ASCII)."""
PATH_PATTERN = r"^[A-Za-z][A-Za-z0-9]*(\[[0-9]{1,3}\])?(\.[A-Za-z][A-Za-z0-9]*(\[[0-9]{1,3}\])?)*$"
"""Dotted element names, each with an optional ``[index]`` (a list's first item without)."""
_TOKEN = re.compile(r"\{\{[^}]*\}\}")


EHR_LOCATION = Released(Release.PUBLIC_INPUT, note="where an EHR keeps the feature, as the schema "
                        "declares it")


class FeaturePrefetch(RequestModel):
    """A FHIR query and a value path, or an Observation code of the clinic's code system."""

    query: Annotated[str | None, EHR_LOCATION] = Field(
        default=None, max_length=500, pattern=QUERY_PATTERN,
        description="a FHIR read or search about the patient, with {{context.patientId}}")
    path: Annotated[str | None, EHR_LOCATION] = Field(
        default=None, max_length=200, pattern=PATH_PATTERN,
        description="the value's path in the query's resource (e.g. valueQuantity.value)")
    system: Annotated[str | None, EHR_LOCATION] = Field(
        default=None, min_length=1, max_length=200, pattern=r"^[!-~]+$")
    code: Annotated[str | None, EHR_LOCATION] = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[!-~]+$")

    @model_validator(mode="after")
    def _one_way(self) -> "FeaturePrefetch":
        """Exactly one way: query with path, or system with code."""
        by_query = self.query is not None or self.path is not None
        by_code = self.system is not None or self.code is not None
        if by_query == by_code:
            raise ValueError("give either query and path, or system and code")
        if by_query and (self.query is None or self.path is None):
            raise ValueError("a query needs a path, and a path a query")
        if by_code and (self.system is None or self.code is None):
            raise ValueError("an Observation code needs both system and code")
        if self.query is not None:
            tokens = set(_TOKEN.findall(self.query))
            if tokens != {PATIENT_TOKEN}:
                raise ValueError(f"a query names the patient as {PATIENT_TOKEN} and nothing "
                                 "else in {{...}}")
        return self

    @property
    def resource_type(self) -> str | None:
        """The FHIR resource type the query returns (None for an Observation code)."""
        if self.query is None:
            return None
        return re.split(r"[/?]", self.query, maxsplit=1)[0]
