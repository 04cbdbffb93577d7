"""Checking FHIR answers as a FHIR client would: parsed by fhir.resources (its R4B models; the
RiskAssessment, CodeSystem, OperationOutcome and Device used here are R4's unchanged)."""

from typing import Any

from fhir.resources.R4B.codesystem import CodeSystem
from fhir.resources.R4B.operationoutcome import OperationOutcome
from fhir.resources.R4B.riskassessment import RiskAssessment
from httpx import Response

FHIR_JSON = "application/fhir+json"
MODELS = {"RiskAssessment": RiskAssessment, "CodeSystem": CodeSystem,
          "OperationOutcome": OperationOutcome}


def valid(resource: dict[str, Any]) -> Any:
    """The resource parsed (and so validated) by its R4 model."""
    return MODELS[resource["resourceType"]].model_validate(resource)


def outcome(response: Response, status: int, *, field: str | None = None,
            allowed: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """An OperationOutcome answer with ``status``, optionally naming ``field`` (an issue's
    expression) and its range (in the diagnostics), and the problem ``kind``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(FHIR_JSON), response.headers
    body = response.json()
    assert body["resourceType"] == "OperationOutcome", body
    valid(body)
    issues = body["issue"]
    assert issues and all(i["severity"] in ("error", "fatal") and i["diagnostics"]
                          for i in issues), body
    if kind is not None:
        assert {i["details"]["coding"][0]["code"] for i in issues} == {kind}, body
    if field is not None:
        named = [i for i in issues if i.get("expression") == [field]]
        assert named, f"no issue names {field!r}: {body}"
        if allowed is not None:
            assert any(f"(allowed {allowed})" in i["diagnostics"] for i in named), named
    return body
