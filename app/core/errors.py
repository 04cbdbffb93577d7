"""Domain errors and their single mapping to RFC 9457 problem+json responses."""

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.methods import allowed_methods, literal_methods
from app.core.schemas import (
    ALLOWED_RANGES,
    NO_CONTROL_CHARACTERS,
    TEXT_RULE,
    ranges_of,
    refused_character,
)
from app.core.validation import MAX_LISTED_ERRORS, listed

PROBLEM_JSON = "application/problem+json"
logger = logging.getLogger(__name__)


class DomainError(Exception):
    """An error the client can act on; ``status`` and ``kind`` shape the problem document."""

    status: int = 400
    kind: str = "bad-request"
    title: str = "Bad request"
    headers: dict[str, str] = {}  # extra response headers, e.g. a 401's WWW-Authenticate

    def __init__(self, detail: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.extra = extra


class NotFound(DomainError):
    status, kind, title = 404, "not-found", "Not found"


class InvalidRequest(DomainError):
    """A request that parsed but breaks a rule needing the database (e.g. delta vs n_rows)."""

    status, kind, title = 422, "invalid-request", "Invalid request"


class Conflict(DomainError):
    status, kind, title = 409, "conflict", "Conflict"


class Unauthorized(DomainError):
    """No usable API key (missing, unknown or revoked): 401 with a Bearer challenge."""

    status, kind, title = 401, "unauthorized", "Unauthorized"

    def __init__(self, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        # RFC 6750: no error code when no key was sent, "invalid_token" for a bad one.
        challenge = "Bearer" if error is None else f'Bearer error="{error}"'
        self.headers = {"WWW-Authenticate": challenge}


class Forbidden(DomainError):
    """A valid key whose role may not call this endpoint."""

    status, kind, title = 403, "forbidden", "Forbidden"


class UnsupportedMediaType(DomainError):
    """A body whose Content-Type the route cannot read (a form or text sent to a JSON route)."""

    status, kind, title = 415, "unsupported-media-type", "Unsupported media type"


class MalformedBody(DomainError):
    """A body refused before its fields are validated: not JSON, a key given twice, a number
    too long to read. Same kind as a field's validation error: the client fixes the body."""

    status, kind, title = 422, "validation-error", "Invalid request"


def problem(
    status: int, kind: str, title: str, detail: str, instance: str, **extra: Any
) -> JSONResponse:
    body = {
        "type": f"https://dpcrisis.dev/problems/{kind}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def _allowed_range(ctx: dict[str, Any]) -> str | None:
    lower = ctx.get("ge", ctx.get("gt"))
    upper = ctx.get("le", ctx.get("lt"))
    if lower is None and upper is None:
        return None
    left = "[" if "ge" in ctx else "(" if "gt" in ctx else "(-inf"
    right = "]" if "le" in ctx else ")" if "lt" in ctx else "inf)"
    lo = "" if lower is None else str(lower)
    hi = "" if upper is None else str(upper)
    if lower is None:
        return f"{left}, {hi}{right}"
    if upper is None:
        return f"{left}{lo}, {right}"
    return f"{left}{lo}, {hi}{right}"


# (field, tag) pairs of the request models' discriminated unions.
DISCRIMINATED_TAGS = frozenset({("source", "synthetic"), ("source", "upload"),
                                ("source", "union")})


def _field_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    # Drop pydantic's union-branch tags (e.g. "function-after[...]") from the path, and a
    # discriminated union's tag ("source.synthetic.n_rows" is the request's "source.n_rows").
    parts = [p for p in parts if "[" not in p]
    parts = [p for i, p in enumerate(parts)
             if not (i and (parts[i - 1], p) in DISCRIMINATED_TAGS)]
    return ".".join(parts) or "body"


def _body_ranges(request: Request) -> dict[str, str]:
    """The ranges of the body model of the route ``request`` matched (none without one)."""
    body_field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(body_field, "field_info", None), "annotation", None)
    return ranges_of(model) if isinstance(model, type) and issubclass(model, BaseModel) else {}


def _listed_error(err: dict[str, Any], ranges: dict[str, str] | None = None) -> dict[str, Any]:
    ctx = err.get("ctx") or {}
    item: dict[str, Any] = {"field": _field_name(tuple(err["loc"])), "message": err["msg"]}
    field = item["field"]
    allowed = (ranges or {}).get(field) or ALLOWED_RANGES.get(field) or _allowed_range(ctx)
    if allowed:
        item["allowed"] = allowed
    if "allowed" in ctx:
        item["allowed"] = ctx["allowed"]
    if err["type"] == "string_pattern_mismatch" and ctx.get("pattern") == NO_CONTROL_CHARACTERS:
        # The pattern itself (a long character class) would tell a client nothing.
        item.update(message=refused_character(err.get("input")), allowed=TEXT_RULE)
    return item


def error_list(
    errors: list[dict[str, Any]], *, count: int | None = None, complete: bool = True
) -> dict[str, Any]:
    """The one shape of every listed error: the first ``MAX_LISTED_ERRORS`` errors, how many
    there are (``error_count``), and ``complete: false`` when that count is a lower bound."""
    shape: dict[str, Any] = {
        "errors": errors[:MAX_LISTED_ERRORS],
        "error_count": len(errors) if count is None else count,
    }
    if not complete:
        shape["complete"] = False
    return shape


def _summary_detail(errors: list[dict[str, Any]], count: int, complete: bool) -> str:
    detail = "; ".join(_describe(e) for e in errors)
    more = count - len(errors)
    if more > 0 or not complete:
        detail += f"; and {more}{'' if complete else ' or more'} other error(s)"
    return detail


def _validation_problem(request: Request, exc: RequestValidationError) -> JSONResponse:
    ranges = _body_ranges(request)
    errors, count, complete = listed(exc.errors(), lambda err: _listed_error(err, ranges))
    return problem(422, "validation-error", "Invalid request",
                   _summary_detail(errors, count, complete), request.url.path,
                   **error_list(errors, count=count, complete=complete))


def problem_body(exc: DomainError, instance: str) -> dict[str, Any]:
    """The problem+json document of ``exc`` (also stored with a failed upload, so that its
    resource answers with the body the request itself would have had)."""
    extra = dict(exc.extra)
    if exc.field:
        extra["errors"] = [{"field": exc.field, "message": exc.detail, **_pick(extra)}]
    if isinstance(extra.get("errors"), list):
        count = extra.get("total")
        extra.update(error_list(extra["errors"], count=count if isinstance(count, int) else None,
                                complete=extra.get("complete") is not False))
    return {"type": f"https://dpcrisis.dev/problems/{exc.kind}", "title": exc.title,
            "status": exc.status, "detail": exc.detail, "instance": instance, **extra}


def _domain_problem(request: Request, exc: DomainError) -> JSONResponse:
    body = problem_body(exc, request.url.path)
    response = JSONResponse(body, status_code=exc.status, media_type=PROBLEM_JSON)
    response.headers.update(exc.headers)
    return response


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as problem+json; nothing leaks as a bare 500 with a stack trace."""

    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        return _domain_problem(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only a path parameter that failed to parse as a word (a number is never a literal
        # segment) can be a literal path asked with another method (GET /v1/models/rollback:
        # a 405); other 422s never build the path table.
        if _words_in_path(exc.errors()):
            literal = literal_methods(request)
            if literal and request.method not in literal:
                return _method_not_allowed(request, literal)
        return _validation_problem(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:  # every route's methods; the router's when undocumented
            methods = allowed_methods(request) or (exc.headers or {}).get("Allow", "").split(
                ", ")
            return _method_not_allowed(request, [m for m in methods if m])
        response = problem(
            exc.status_code, "http-error", str(exc.detail), str(exc.detail), request.url.path
        )
        response.headers.update(exc.headers or {})  # a 401's WWW-Authenticate
        return response

    @app.exception_handler(OperationalError)
    async def _database(request: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database unavailable: %s", type(exc.orig).__name__)
        return _unavailable(request, "database-unavailable", "Database unavailable",
                            "The database did not answer; nothing was written. Retry shortly.")

    @app.exception_handler(PoolTimeout)
    async def _overloaded(request: Request, _exc: PoolTimeout) -> JSONResponse:
        # Every connection of the pool stayed busy past DATABASE_POOL_TIMEOUT_SECONDS: the
        # service is overloaded, the request did nothing, and a later retry may pass.
        logger.warning("overloaded: no database connection was free in time")
        return _unavailable(request, "overloaded", "Service overloaded",
                            "Too many requests are in progress; nothing was written. Retry "
                            "shortly.")


def _unavailable(request: Request, kind: str, title: str, detail: str) -> JSONResponse:
    """A 503 the client may retry after ``Retry-After`` seconds."""
    response = problem(503, kind, title, detail, request.url.path)
    response.headers["Retry-After"] = "2"
    return response


def _words_in_path(errors: Sequence[Any]) -> bool:
    """Whether every error is a path parameter whose value is a word, not a number."""
    return bool(errors) and all(
        error.get("loc", ("",))[0] == "path"
        and not str(error.get("input", "")).lstrip("+-").isdigit() for error in errors)


def _method_not_allowed(request: Request, methods: list[str]) -> JSONResponse:
    """A 405 whose ``Allow`` lists every method of every route at the path."""
    response = problem(405, "http-error", "Method Not Allowed",
                       f"{request.method} is not allowed here; allowed: {', '.join(methods)}",
                       request.url.path)
    response.headers["Allow"] = ", ".join(methods)
    return response


def _describe(error: dict[str, Any]) -> str:
    allowed = f" (allowed {error['allowed']})" if "allowed" in error else ""
    return f"{error['field']}: {error['message']}{allowed}"


def _pick(extra: dict[str, Any]) -> dict[str, Any]:
    return {k: extra[k] for k in ("allowed",) if k in extra}
