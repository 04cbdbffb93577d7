"""Every member an error body can carry has a release-inventory entry (``problem:<member>``).

An error is problem+json (``app.core.errors``): the ``Problem`` component's members, which the
OpenAPI walk classifies, and whatever an error adds: the keywords of ``DomainError(detail,
field=..., **extra)`` and its subclasses, the handlers' error lists, a 413's limit. The scan
(``inventory_scans.problem_members``) reads them from the source of app/ and worker/; a member
it cannot read (a ``**mapping`` built at run time) fails here with its place.
"""

import asyncio
import json
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.requests import Request

import worker.runner  # noqa: F401 - the worker's modules too: their error classes are scanned
from app.core.errors import DomainError
from app.core.openapi import FieldProblem, Problem
from app.main import create_app
from app.privacy import inventory
from tests.privacy.inventory_scans import domain_errors, problem_members, sources

APP = create_app()  # every route module imported: every error class defined
ERRORS = domain_errors(DomainError)
SCAN = problem_members(sources("app", "worker"), ERRORS)
PROBLEM = set(Problem.model_fields)
FIELD_PROBLEM = set(FieldProblem.model_fields)


def _classified() -> set[str]:
    return {w.removeprefix("problem:") for w in inventory.BY_WHERE if w.startswith("problem:")}


def extra_members(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Members beyond the ``Problem`` component's (an ``errors`` item is a FieldProblem)."""
    return {m: where for m, where in found.items()
            if m not in PROBLEM and not m.startswith("errors[].")}


def test_the_scan_sees_the_known_members() -> None:
    assert {"DatasetAlreadyRegistered", "BudgetExceeded", "TableInvalid",
            "UploadTooSlow"} <= set(ERRORS)
    assert {"existing_dataset_id", "remaining_epsilon", "job_epsilon", "release_epsilon",
            "error_count", "max_bytes", "total", "state"} <= set(SCAN.found)
    assert "error" not in SCAN.found  # Unauthorized's own parameter: a header, not a member


def test_every_member_of_an_error_body_names_its_release() -> None:
    assert not SCAN.unresolved, "error members the scan cannot read (use literal keywords):" \
        "\n" + "\n".join(SCAN.unresolved)
    missing = {m: w for m, w in extra_members(SCAN.found).items() if m not in _classified()}
    assert not missing, f"error body members without a problem:<member> entry: {missing}"


def test_an_errors_list_holds_field_problems() -> None:
    items = {m.removeprefix("errors[].") for m in SCAN.found if m.startswith("errors[].")}
    assert items and items <= FIELD_PROBLEM, items - FIELD_PROBLEM


def test_no_problem_entry_is_stale() -> None:
    stale = _classified() - set(extra_members(SCAN.found))
    assert not stale, f"problem:<member> entries no error carries: {stale}"


def _request() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/x", "headers": [],
                    "query_string": b"", "app": APP})


def _body(error: Exception) -> dict[str, Any]:
    """The problem document the app's own handler makes of ``error``."""
    handler: Any = APP.exception_handlers[type(error)]
    response = asyncio.run(handler(_request(), error))
    return json.loads(response.body)


def test_the_handlers_add_only_scanned_members() -> None:
    """A runtime check of the scan: the handlers' own members (the error list's count and
    completeness) on the fullest domain error and validation error."""
    error = DomainError("bad", field="x", allowed="[0, 1]", errors=[{"field": "y",
                        "message": "m"}], total=3, complete=False)
    added = set(_body(error)) - set(error.extra)
    errors = [{"loc": ("body", f"f{k}"), "msg": "m", "type": "t"} for k in range(200)]
    added |= set(_body(RequestValidationError(errors)))
    assert {"error_count"} <= added - PROBLEM <= set(SCAN.found), added
