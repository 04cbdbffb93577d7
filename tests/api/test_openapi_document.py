"""The OpenAPI document describes the service as a client needs it: servers, contact and
licence; no ``accept`` header parameters (content negotiation is the responses' media types);
real schemas for the FHIR answer (``application/fhir+json``) and the CDS Hooks discovery."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.api.scoring_helpers import train_models
from tests.conftest import PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _document() -> dict[str, Any]:
    return create_app().openapi()  # building the app touches no database


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items()
            for method, op in item.items() if method in HTTP_METHODS]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


def test_servers_contact_and_licence() -> None:
    document = _document()
    assert document["servers"] and all(s["url"] for s in document["servers"])
    assert document["info"]["contact"]["name"]
    assert document["info"]["license"]["name"]


def test_no_operation_lists_accept_content_type_or_authorization_headers() -> None:
    for path, method, operation in _operations(_document()):
        headers = {p["name"].lower() for p in operation.get("parameters", [])
                   if p["in"] == "header"}
        assert not headers & {"accept", "content-type", "authorization"}, (method, path)


def test_every_success_response_has_a_schema_but_for_pages_and_files() -> None:
    for path, method, operation in _operations(_document()):
        for status, response in operation["responses"].items():
            if not status.startswith("2"):
                continue
            for media, content in response.get("content", {}).items():
                if media.startswith(("text/", "image/")):
                    continue
                assert content.get("schema"), (method, path, status, media)


def test_the_fhir_answer_is_a_documented_risk_assessment() -> None:
    document = _document()
    ok = document["paths"]["/v1/risk/fhir"]["post"]["responses"]["200"]
    assert set(ok["content"]) == {"application/fhir+json"}
    schema = _resolve(document, ok["content"]["application/fhir+json"]["schema"])
    assert schema["properties"]["resourceType"] == {"const": "RiskAssessment"}
    prediction = _resolve(document, schema["properties"]["prediction"]["items"])
    assert prediction["properties"]["probabilityDecimal"]["maximum"] == 1


def test_cds_discovery_and_answers_have_schemas() -> None:
    document = _document()
    discovery = document["paths"]["/cds-services"]["get"]["responses"]["200"]["content"]
    services = _resolve(document, discovery["application/json"]["schema"])
    assert "services" in services["properties"]
    for path, method, operation in _operations(document):
        if path.startswith("/cds-services") and method == "post":
            content = operation["responses"]["200"]["content"]
            assert content["application/json"]["schema"].get("$ref"), path


def test_a_real_fhir_answer_fits_its_schema(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    response = client.post("/v1/risk/fhir", json={"features": PATIENT,
                                                  "subject": "Patient/123"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/fhir+json")
    resource = response.json()
    document = client.get("/openapi.json").json()
    schema = _resolve(document, document["paths"]["/v1/risk/fhir"]["post"]["responses"]["200"]
                      ["content"]["application/fhir+json"]["schema"])
    assert set(schema["required"]) <= set(resource)
    assert set(resource) <= set(schema["properties"]), set(resource) - set(schema["properties"])
    assert schema["properties"]["status"]["enum"].count(resource["status"]) == 1
    prediction = _resolve(document, schema["properties"]["prediction"]["items"])
    for item in resource["prediction"]:
        assert set(item) <= set(prediction["properties"])
        assert 0 <= item["probabilityDecimal"] <= 1
