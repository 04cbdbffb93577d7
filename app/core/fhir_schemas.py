"""JSON Schemas of the FHIR R4 resources the API answers with, for its OpenAPI document.

FastAPI cannot see the shape of a ``JSONResponse``, so a FHIR route documented only its media
type (``application/fhir+json`` with no schema). These schemas follow the FHIR R4 element
definitions (https://hl7.org/fhir/R4/riskassessment.html and the datatypes it uses): the
elements the service fills are described, and ``additionalProperties`` stays open for the
standard's other elements, so a client generated from the document reads every valid resource.
``app.core.openapi`` puts them, inline (each FHIR answer is one classified release in the
release inventory, not a set of shared components), where a FHIR route's success response has
no schema of its own.
"""

from typing import Any


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


_CODING = {
    "type": "object",
    "description": "FHIR R4 Coding: a code from a code system.",
    "properties": {"system": {"type": "string", "format": "uri"}, "version": {"type": "string"},
                   "code": {"type": "string"}, "display": {"type": "string"}},
}
_CODEABLE_CONCEPT = {
    "type": "object",
    "description": "FHIR R4 CodeableConcept: codings and/or plain text.",
    "properties": {"coding": _array(_CODING), "text": {"type": "string"}},
}
_EXTENSION = {
    "type": "object",
    "description": "FHIR R4 Extension: a url and one value[x] (valueCoding, valueDecimal, ...).",
    "required": ["url"],
    "properties": {"url": {"type": "string", "format": "uri"}},
    "additionalProperties": True,
}
_REFERENCE = {
    "type": "object",
    "description": "FHIR R4 Reference: a literal reference (Patient/123, #device) and/or a "
                   "display text.",
    "properties": {"reference": {"type": "string"}, "type": {"type": "string"},
                   "display": {"type": "string"}, "extension": _array(_EXTENSION)},
}
_PERIOD = {
    "type": "object",
    "description": "FHIR R4 Period (dateTime bounds).",
    "properties": {"start": {"type": "string", "format": "date-time"},
                   "end": {"type": "string", "format": "date-time"}},
}
_PREDICTION = {
    "type": "object",
    "description": "One predicted outcome of a RiskAssessment.",
    "properties": {
        "outcome": _CODEABLE_CONCEPT,
        "probabilityDecimal": {"type": "number", "minimum": 0, "maximum": 1,
                               "description": "a probability on a 0-1 scale, not a percentage"},
        "qualitativeRisk": _CODEABLE_CONCEPT,
        "relativeRisk": {"type": "number"},
        "whenPeriod": _PERIOD,
        "rationale": {"type": "string"},
    },
}
_RISK_ASSESSMENT = {
    "type": "object",
    "title": "RiskAssessment",
    "description": "A FHIR R4 RiskAssessment: the patient's predicted probability and risk band "
                   "(prediction), the features scored and their contributions (basis), the "
                   "model (method, performer) and its privacy statement (note).",
    "required": ["resourceType", "status", "subject"],
    "properties": {
        "resourceType": {"const": "RiskAssessment"},
        "id": {"type": "string"},
        "contained": _array({"type": "object", "required": ["resourceType"],
                             "additionalProperties": True}),
        "identifier": _array({"type": "object", "additionalProperties": True}),
        "status": {"enum": ["registered", "preliminary", "final", "amended", "corrected",
                            "cancelled", "entered-in-error", "unknown"]},
        "method": _CODEABLE_CONCEPT,
        "code": _CODEABLE_CONCEPT,
        "subject": _REFERENCE,
        "occurrenceDateTime": {"type": "string", "format": "date-time"},
        "performer": _REFERENCE,
        "basis": _array(_REFERENCE),
        "prediction": _array(_PREDICTION),
        "mitigation": {"type": "string"},
        "note": _array({"type": "object", "properties": {"text": {"type": "string"}},
                        "required": ["text"]}),
    },
    "additionalProperties": True,
}
_RESOURCE = {
    "type": "object",
    "title": "Resource",
    "description": "A FHIR R4 resource (its resourceType names which).",
    "required": ["resourceType"],
    "properties": {"resourceType": {"type": "string"}, "id": {"type": "string"}},
    "additionalProperties": True,
}

RISK_ASSESSMENT: dict[str, Any] = _RISK_ASSESSMENT
RESOURCE: dict[str, Any] = _RESOURCE

SCHEMA_BY_ROUTE: dict[tuple[str, str], dict[str, Any]] = {
    ("/v1/risk/fhir", "post"): RISK_ASSESSMENT,
}
"""(path, method) -> the JSON Schema (OpenAPI 3.1) of the FHIR resource the route answers
with; any other FHIR route gets ``RESOURCE``."""
