"""Scoring routes answer every error of a request at once.

A scoring body is checked in two steps: its shape (ids, model_id, the batch's size) by the
request model, then each patient's features against the scoring model's declared schema, known
only once the model is resolved. When the first step fails, the second still runs on whatever
features it can read (and the model it can resolve), so one answer names a bad id and a bad
PHQ-9 together, as it did when the features had a fixed schema.
"""

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.core.errors import DomainError, MalformedBody
from app.core.ids import MAX_ID
from app.core.json_body import JsonRoute, parse
from app.scoring import model_cache
from app.scoring.patients import check
from app.scoring.service import batch_path, single_path

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _patients(body: Any) -> tuple[list[Any], Any] | None:
    """The features objects of a scoring body, and where patient k's sit."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("patients"), list):
        listed = [p.get("features") if isinstance(p, dict) else None for p in body["patients"]]
        return listed, batch_path
    if "features" in body:
        return [body["features"]], single_path
    return None


def _feature_errors(body: Any) -> list[dict[str, Any]]:
    found = _patients(body)
    model_id = body.get("model_id") if isinstance(body, dict) else None
    in_range = model_id is None or (type(model_id) is int and 1 <= model_id <= MAX_ID)
    if found is None or not in_range:
        return []  # no model it could name: the first step's errors say enough
    try:
        encoder = model_cache.resolve(model_id).encoder
    except DomainError:
        return []  # no model to check against: the first step's errors say enough
    features, at = found
    readable = [(k, f) for k, f in enumerate(features) if isinstance(f, dict)]
    _, errors = check(encoder, [f for _, f in readable],
                      lambda i: at(readable[i][0]))
    return errors


class ScoringRoute(JsonRoute):
    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                try:
                    body = parse(await request.body())
                except MalformedBody:
                    raise exc from None
                more = await run_in_threadpool(_feature_errors, body)
                known = {tuple(e["loc"]) for e in exc.errors()}
                extra = [e for e in more if tuple(e["loc"]) not in known]
                if not extra:
                    raise
                raise RequestValidationError([*exc.errors(), *extra]) from None

        return route
