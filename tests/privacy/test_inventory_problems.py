"""Every member an error body can carry has a release-inventory entry (``problem:<member>``).

An error is problem+json (``app.core.errors``): the ``Problem`` component's members, which the
OpenAPI walk classifies, and whatever an error adds: the keywords of ``DomainError(detail,
field=..., **extra)`` and its subclasses, the handlers' error lists, a 413's limit. The scan
(``inventory_scans.problem_members``) reads them from the source of app/ and worker/; a member
it cannot read (a ``**mapping`` built at run time) fails here with its place.
"""

import asyncio
import functools
import json
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request

import worker.runner  # noqa: F401 - the worker's modules too: their error classes are scanned
from app.core.errors import DomainError
from app.core.openapi import FieldProblem, Problem
from app.main import create_app
from app.privacy import inventory
from tests.privacy.inventory_scans import Scan, domain_errors, problem_members, sources

PROBLEM = set(Problem.model_fields)
FIELD_PROBLEM = set(FieldProblem.model_fields)


@functools.cache
def app() -> FastAPI:
    """The service's app: every route module imported, so every error class defined."""
    return create_app()


@functools.cache
def errors() -> dict[str, type[Exception]]:
    """Every domain error class by name, once the app has imported them all."""
    app()
    return domain_errors(DomainError)


@functools.cache
def scan() -> Scan:
    """The scan of app/ and worker/, made once per test process by the first test that reads
    it (not at collection, where every test process would pay for it)."""
    return problem_members(sources("app", "worker"), errors())


def _classified() -> set[str]:
    return {w.removeprefix("problem:") for w in inventory.BY_WHERE if w.startswith("problem:")}


def extra_members(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """Members beyond the ``Problem`` component's (an ``errors`` item is a FieldProblem)."""
    return {m: where for m, where in found.items()
            if m not in PROBLEM and not m.startswith("errors[].")}


def test_the_scan_sees_the_known_members() -> None:
    assert {"DatasetAlreadyRegistered", "BudgetExceeded", "TableInvalid",
            "UploadTooSlow"} <= set(errors())
    assert {"existing_dataset_id", "remaining_epsilon", "job_epsilon", "release_epsilon",
            "error_count", "max_bytes", "total", "state"} <= set(scan().found)
    assert "error" not in scan().found  # Unauthorized's own parameter: a header, not a member


def test_every_member_of_an_error_body_names_its_release() -> None:
    assert not scan().unresolved, "error members the scan cannot read (use literal keywords):" \
        "\n" + "\n".join(scan().unresolved)
    missing = {m: w for m, w in extra_members(scan().found).items() if m not in _classified()}
    assert not missing, f"error body members without a problem:<member> entry: {missing}"


def test_an_errors_list_holds_field_problems() -> None:
    items = {m.removeprefix("errors[].") for m in scan().found if m.startswith("errors[].")}
    assert items and items <= FIELD_PROBLEM, items - FIELD_PROBLEM


def test_no_problem_entry_is_stale() -> None:
    stale = _classified() - set(extra_members(scan().found))
    assert not stale, f"problem:<member> entries no error carries: {stale}"


def _request() -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/x", "headers": [],
                    "query_string": b"", "app": app()})


def _body(error: Exception) -> dict[str, Any]:
    """The problem document the app's own handler makes of ``error``."""
    handler: Any = app().exception_handlers[type(error)]
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
    assert {"error_count"} <= added - PROBLEM <= set(scan().found), added
