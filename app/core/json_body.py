"""JSON request bodies read strictly, before any field is validated.

``json.loads`` keeps the last of two equal keys, so ``{"prior_crisis": 99, "prior_crisis": 0}``
would be scored as 0 while a proxy, a log or an audit that reads the first one sees 99. Every
route with a JSON body is a ``JsonRoute``: its body is parsed here, and refused with a
problem+json naming the place when

- its Content-Type is not JSON (``application/json`` or a ``+json`` type such as
  ``application/fhir+json``): 415, ``field`` "Content-Type";
- it is not JSON text (truncated, not UTF-8, nested deeper than the parser goes): 422,
  ``field`` "body", the byte offset in the detail and in ``offset``;
- an object gives a key twice, or an integer has more digits than Python converts
  (``sys.get_int_max_str_digits()``, 4,300): 422 naming the key's path
  (``patients.3.features.prior_crisis``).

The duplicate check is one Python call per JSON object, a cost that grows with the objects in
the body (``bench/json_body.py`` measures it against ``json.loads`` alone, on the largest batch
and on one patient). Finding the path is left to the error case: the body is parsed a second
time with hooks that mark what was wrong, and the marks are searched for.
"""

import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.exceptions import HTTPException
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message, Receive

from app.core.errors import MalformedBody, UnsupportedMediaType
from app.core.schemas import ALLOWED_RANGES

JSON_MEDIA_TYPES = "application/json or application/*+json"


class _KeyRepeated(Exception):
    """Raised by the fast parse at the first object with a repeated key."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        raise _KeyRepeated
    return obj


class _Repeated(dict[str, Any]):
    """An object of the marking parse that gave ``key`` twice."""

    key: str


class _LongInteger(int):
    """An integer of the marking parse with ``digits`` digits, more than Python converts."""

    digits: int


def _marking_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _Repeated(obj)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    return marked


def _marking_int(text: str) -> int:
    limit = sys.get_int_max_str_digits()
    if limit and len(text.lstrip("-")) > limit:
        marked = _LongInteger(0)
        marked.digits = len(text.lstrip("-"))
        return marked
    return int(text)


def _first_mark(tree: Any) -> tuple[str, Any] | None:
    """The dotted path of the first marked value in document order, and the mark."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), tree)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Repeated):
            return ".".join((*path, node.key)), node
        if isinstance(node, _LongInteger):
            return ".".join(path), node
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, str(i)), v) for i, v in reversed(list(enumerate(node))))
    return None


def _located(body: bytes, fallback: str) -> MalformedBody:
    """The error naming where the body repeats a key or holds a too-long integer."""
    try:
        found = _first_mark(json.loads(body, object_pairs_hook=_marking_object,
                                       parse_int=_marking_int))
    except (ValueError, RecursionError):
        found = None
    if found is None:
        return MalformedBody(fallback, field="body")
    path, mark = found
    if isinstance(mark, _Repeated):
        return MalformedBody(f"{path}: the key {mark.key!r} is given more than once",
                             field=path, allowed="each key once")
    detail = (f"{path}: an integer of {mark.digits} digits (at most "
              f"{sys.get_int_max_str_digits()} are read)")
    allowed = ALLOWED_RANGES.get(path)
    return MalformedBody(detail, field=path, **({"allowed": allowed} if allowed else {}))


def _not_json(exc: json.JSONDecodeError) -> MalformedBody:
    offset = len(exc.doc[:exc.pos].encode("utf-8", "surrogatepass"))
    return MalformedBody(f"invalid JSON at byte {offset} (line {exc.lineno}, column "
                         f"{exc.colno}): {exc.msg}", field="body", offset=offset)


def parse(body: bytes) -> Any:
    """``body`` as JSON, or a ``MalformedBody`` saying what is wrong and where."""
    try:
        return json.loads(body, object_pairs_hook=_unique_keys)
    except _KeyRepeated:
        raise _located(body, "an object gives a key more than once") from None
    except json.JSONDecodeError as exc:
        raise _not_json(exc) from None
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not UTF-8 text (byte {exc.start})", field="body",
                            offset=exc.start) from None
    except RecursionError:
        raise MalformedBody("the body is nested too deeply to read", field="body") from None
    except ValueError as exc:  # an integer over the digit limit
        raise _located(body, f"a number cannot be read ({exc.args[0].split(':')[0]})"
                       ) from None


def is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, with any parameters."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


class JsonRequest(Request):
    """A request whose ``json()`` refuses repeated keys (``parse``)."""

    _parsed: Any

    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            self._parsed = parse(await self.body())
        return self._parsed


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` for a body already read: the body once, then the connection's messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _strict(request: Request) -> JsonRequest:
    """``request`` with a strictly parsed body. The body is read through ``request`` itself,
    so a route wrapping this one can still read it there; a non-empty body is parsed now, so
    its errors leave as problems of their own (inside FastAPI's handler any error but a JSON
    syntax error becomes a bare 400)."""
    try:
        body = await request.body()
    except ClientDisconnect:
        raise HTTPException(400, "the client went away before the body was read") from None
    strict = JsonRequest(request.scope, _replaying(body, request.receive))
    if not body:
        return strict  # no body: the route's own rules (a required body is a 422)
    content_type = request.headers.get("content-type")
    if not is_json(content_type):
        said = f"{content_type!r}" if content_type else "no Content-Type"
        raise UnsupportedMediaType(f"a JSON body is read here, and this one came with {said}",
                                   field="Content-Type", allowed=JSON_MEDIA_TYPES)
    await strict.json()
    return strict


class JsonRoute(APIRoute):
    """A route whose JSON body is parsed by ``parse``: the ``route_class`` of every router."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        reads_json = self.body_field is not None and not isinstance(
            self.body_field.field_info, params.Form)
        if not reads_json:
            return handler

        async def strict_json_handler(request: Request) -> Response:
            return await handler(await _strict(request))

        return strict_json_handler
