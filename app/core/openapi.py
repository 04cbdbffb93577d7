"""The OpenAPI document says what errors really look like: RFC 9457 problem+json.

FastAPI documents a 422 as ``application/json`` with its own ``HTTPValidationError`` body and no
other error at all, while every error here leaves through ``core/errors.py`` as
``application/problem+json``. Rather than repeat ``responses=`` on every route, the generated
document is rewritten once: each operation gets the errors that follow from its shape (401/403
behind a key, 404 with a path id, 400/408/413 with a body, 415 with a JSON body, 422 with any input,
503 when the database is down), and every error a route declares itself (e.g.
``responses=problems(409)``) gets the ``Problem`` schema under ``application/problem+json``.

Every operation is named after its route function, in camelCase (``create_job`` ->
``createJob``), so generated clients read like the code.
"""

import copy
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from app.core import fhir_schemas
from app.core.errors import PROBLEM_JSON

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
FHIR_JSON = "application/fhir+json"
OPERATION_OUTCOME = {"type": "object", "description": "a FHIR R4 OperationOutcome (the "
                     "default on FHIR routes; problem+json when Accept prefers it)"}


API_CONTACT = {"name": "dpcrisis maintainers"}
API_LICENSE = {"name": "Proprietary"}
SERVERS = [{"url": "/", "description": "this service (where this document came from)"}]
IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
"""Header parameters OpenAPI says SHALL be ignored: content negotiation is the responses'
media types, and the key is the security scheme."""


class FieldProblem(BaseModel):
    """One rejected input: where it is, what is wrong, and what would be accepted."""

    field: str = Field(description="dotted path of the input, e.g. privacy.target_epsilon")
    message: str
    allowed: str | None = Field(default=None, description="the allowed range or values")


class Problem(BaseModel):
    """RFC 9457 problem details; some errors add members (e.g. ``remaining_epsilon``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="a URI naming the kind of problem")
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    instance: str | None = Field(default=None, description="the request path")
    errors: list[FieldProblem] | None = None


def operation_id(route: APIRoute) -> str:
    """The route function's name in camelCase: ``get_job_privacy_report`` ->
    ``getJobPrivacyReport`` (``generate_unique_id_function`` of the app)."""
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route's own errors, e.g. ``problems(409)`` where budget may run out."""
    return {status: {"description": HTTPStatus(status).phrase} for status in statuses}


def _is_error(status: str) -> bool:
    return status == "default" or status[:1] in ("4", "5")


def _implied_errors(operation: dict[str, Any]) -> list[int]:
    params = operation.get("parameters", [])
    implied = [503]
    if operation.get("security"):
        implied += [401, 403]
    if any(p.get("in") == "path" for p in params):
        implied.append(404)
    if "requestBody" in operation:
        # 400: a body the client stopped sending; 408: one sent too slowly (body_limit)
        implied += [400, 408, 413]
    if "application/json" in operation.get("requestBody", {}).get("content", {}):
        implied.append(415)  # a JSON route sent a form or text (app.core.json_body)
    if params or "requestBody" in operation:
        implied.append(422)
    return implied


def _document_errors(operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    fhir = FHIR_JSON in responses.get("200", {}).get("content", {})  # app.fhir.outcome
    for implied in _implied_errors(operation):
        responses.setdefault(str(implied), {})
    for status, response in responses.items():
        if not _is_error(status):
            continue
        if status.isdigit() and not response.get("description"):
            response["description"] = HTTPStatus(int(status)).phrase
        response["content"] = {PROBLEM_JSON: {"schema": PROBLEM_REF}}
        if fhir:
            response["content"][FHIR_JSON] = {"schema": OPERATION_OUTCOME}
    operation["responses"] = dict(sorted(responses.items()))


def _drop_ignored_headers(operation: dict[str, Any]) -> None:
    """No ``accept`` parameter: FastAPI lists a route's ``Header()`` input, but ``Accept`` is
    already said by the response's media types (clients and Swagger UI set it from those)."""
    params = [p for p in operation.get("parameters", [])
              if not (p.get("in") == "header" and p.get("name", "").lower() in IGNORED_HEADERS)]
    if params:
        operation["parameters"] = params
    else:
        operation.pop("parameters", None)


def _document_fhir_success(operation: dict[str, Any], path: str, method: str) -> None:
    """A FHIR route's 200 has its resource's schema (``app.core.fhir_schemas``) unless the
    route gave one; FastAPI's empty ``application/json`` placeholder goes."""
    content = operation.get("responses", {}).get("200", {}).get("content", {})
    if FHIR_JSON not in content:
        return
    if not content[FHIR_JSON].get("schema"):
        schema = fhir_schemas.SCHEMA_BY_ROUTE.get((path, method), fhir_schemas.RESOURCE)
        content[FHIR_JSON] = {"schema": copy.deepcopy(schema)}
    if not content.get("application/json", {}).get("schema", True):
        del content["application/json"]


def _describe_service(document: dict[str, Any]) -> None:
    """Contact, licence and servers, unless the app set its own."""
    info = document.setdefault("info", {})
    info.setdefault("contact", dict(API_CONTACT))
    info.setdefault("license", dict(API_LICENSE))
    if not document.get("servers"):
        document["servers"] = [dict(server) for server in SERVERS]


def _drop_unused(schemas: dict[str, Any], document: dict[str, Any]) -> None:
    """FastAPI's own validation-error schemas are no longer referenced by anything."""
    text = repr(document.get("paths", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}'" not in text:
            schemas.pop(name, None)


def install_problem_docs(app: FastAPI) -> None:
    """Rewrite the app's OpenAPI document (built once, then cached) as described above."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        for path, path_item in document.get("paths", {}).items():
            for method, operation in path_item.items():
                if isinstance(operation, dict) and "responses" in operation:
                    _drop_ignored_headers(operation)
                    _document_fhir_success(operation, path, method)
                    _document_errors(operation)
        _describe_service(document)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(problem.pop("$defs", {}))
        schemas["Problem"] = problem
        _drop_unused(schemas, document)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
