"""FHIR routes answer errors as ``OperationOutcome`` (``application/fhir+json``).

The error is first made into the service's problem document by the one mapping in
``app.core.errors`` (so status, wording and the listed fields are the same as everywhere), then
rewritten: one ``issue`` per listed error (``expression``: the input's path, ``diagnostics``:
what is wrong and what is allowed), else one for the whole problem; each issue's ``details``
codes the problem type (``PROBLEM_SYSTEM``) and the HTTP headers (a 401's
``WWW-Authenticate``, a 503's ``Retry-After``) are kept. A client that prefers
``application/problem+json`` in its ``Accept`` header gets the problem document itself.
"""

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from app.core.errors import PROBLEM_JSON
from app.core.negotiation import quality

FHIR_JSON = "application/fhir+json"
PROBLEM_SYSTEM = "https://dpcrisis.dev/problems"
ISSUE_TYPES = {
    400: "invalid", 401: "login", 403: "forbidden", 404: "not-found", 405: "not-supported",
    409: "conflict", 412: "incomplete", 413: "too-long", 415: "not-supported", 422: "invalid",
    429: "throttled", 503: "transient",
}
"""HTTP status -> the FHIR IssueType code; anything else is ``exception``."""


def wants_problem(accept: str | None) -> bool:
    """Whether the client prefers problem+json to FHIR JSON (a tie goes to FHIR)."""
    return quality(accept, PROBLEM_JSON) > quality(accept, FHIR_JSON)


def _issue(status: int, kind: str, title: str, diagnostics: str,
           field: str | None = None) -> dict[str, Any]:
    issue: dict[str, Any] = {
        "severity": "error" if status < 500 else "fatal",
        "code": ISSUE_TYPES.get(status, "exception"),
        "details": {"coding": [{"system": PROBLEM_SYSTEM, "code": kind}], "text": title},
        "diagnostics": diagnostics,
    }
    if field:
        issue["expression"] = [field]
    return issue


def operation_outcome(problem: dict[str, Any]) -> dict[str, Any]:
    """The OperationOutcome for one problem document."""
    status = int(problem.get("status", 500))
    kind = str(problem.get("type", "")).rsplit("/", 1)[-1] or "error"
    title = str(problem.get("title", "Error"))
    errors = [e for e in problem.get("errors") or [] if isinstance(e, dict)]
    issues = [
        _issue(status, kind, title,
               str(e.get("message", "")) + (f" (allowed {e['allowed']})"
                                            if e.get("allowed") else ""),
               str(e.get("field") or "") or None)
        for e in errors
    ] or [_issue(status, kind, title, str(problem.get("detail", title)))]
    return {"resourceType": "OperationOutcome", "issue": issues}


def as_outcome(response: Response, accept: str | None) -> Response:
    """A problem+json response as an OperationOutcome (unless the client prefers problem)."""
    if wants_problem(accept) or not response.headers.get("content-type", "").startswith(
            PROBLEM_JSON):
        return response
    problem = json.loads(bytes(response.body))
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in ("content-type", "content-length")}
    return JSONResponse(operation_outcome(problem), status_code=response.status_code,
                        media_type=FHIR_JSON, headers=headers)
