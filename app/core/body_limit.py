"""Request bodies larger than ``MAX_REQUEST_BYTES`` are refused with a 413 problem document,
and bodies that arrive too slowly with a 408.

Without a cap a client can make the API buffer and JSON-parse any amount of data (the largest
legitimate body, a 10,000-patient batch, is about 3 MB). A declared ``Content-Length`` over the
cap is refused before the app runs; a chunked body is counted while it streams in and refused
as soon as it passes the cap, so at most the cap plus one chunk is ever read.

Without a pace a client sending one byte a second holds a connection, a task and (for a sync
route) a worker thread for as long as it likes. Every body but a table upload (which keeps its
own pace, ``UPLOAD_*``) must average ``REQUEST_MIN_BYTES_PER_SECOND`` after
``REQUEST_GRACE_SECONDS`` and end within ``REQUEST_MAX_SECONDS``; past that the app's read of
the body fails with a 408 and the connection is closed.
"""

import asyncio
import re
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import problem
from app.core.settings import settings

KIND, TITLE = "content-too-large", "Content too large"


class BodyTooLarge(HTTPException):
    """An HTTPException so FastAPI's body parsing passes it through instead of making it a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes "
                              f"({limit / 2**20:g} MiB, MAX_REQUEST_BYTES)")
        self.limit = limit


class BodyTooSlow(HTTPException):
    """A body that fell behind the request pace (an HTTPException, as ``BodyTooLarge``)."""

    def __init__(self, received: int) -> None:
        rate, grace = settings.request_min_bytes_per_second, settings.request_grace_seconds
        super().__init__(408, f"the request body arrived too slowly ({received} bytes so far): "
                              f"after the first {grace:g} s it must average at least {rate:g} "
                              f"bytes/s and end within {settings.request_max_seconds:g} s")
        self.allowed = (f"at least {rate:g} bytes/s, at most "
                        f"{settings.request_max_seconds:g} s")


def _response(exc: BodyTooLarge, path: str) -> JSONResponse:
    return problem(413, KIND, TITLE, str(exc.detail), path, max_bytes=exc.limit)


def _slow_response(exc: BodyTooSlow, path: str) -> JSONResponse:
    response = problem(408, "request-too-slow", "Request body too slow", str(exc.detail), path,
                       errors=[{"field": "body", "message": str(exc.detail),
                                "allowed": exc.allowed}])
    response.headers["Connection"] = "close"  # the rest of the body is not read
    return response


def _deadline(started: float, received: int) -> float:
    """The monotonic time by which byte ``received + 1`` of a body must have arrived."""
    by_rate = (started + settings.request_grace_seconds
               + (received + 1) / settings.request_min_bytes_per_second)
    return min(by_rate, started + settings.request_max_seconds)


def _declared_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    return int(value) if value is not None and value.isdigit() else None


UPLOAD_PATH = re.compile(r"^/v1/datasets/[^/]+/(data|patient-ids)/?$")


def _is_upload(scope: Scope) -> bool:
    """A table upload or its patient ids (PUT, streamed to disk): their own, larger limit (the
    ids' route caps its body by the dataset's rows as it arrives) and their own pace."""
    return scope.get("method") == "PUT" and bool(UPLOAD_PATH.match(scope["path"]))


class BodyLimitMiddleware:
    """ASGI wrapper enforcing ``settings.max_request_bytes`` and the request pace (read per
    request, so tests and operators can change them without rebuilding the app)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = _is_upload(scope)
        limit = settings.max_upload_bytes if upload else settings.max_request_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _response(BodyTooLarge(limit), scope["path"])(scope, receive, send)
            return
        paced = not upload  # an upload keeps its own pace
        started, received, ended = time.monotonic(), 0, False

        async def counting_receive() -> Message:
            nonlocal received, ended
            if paced and not ended:
                try:
                    message = await asyncio.wait_for(
                        receive(), timeout=max(_deadline(started, received) - time.monotonic(),
                                               0.0))
                except TimeoutError:
                    raise BodyTooSlow(received) from None  # the app's handler answers it
            else:
                message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                ended = not message.get("more_body", False)
                if received > limit:
                    raise BodyTooLarge(limit)  # the app's handler below answers it
            return message

        await self.app(scope, counting_receive, send)


def install_body_limit(app: FastAPI) -> None:
    """Add the middleware and the handler that shapes its 413 as problem+json."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyTooLarge)
        return _response(exc, request.url.path)

    async def handle_slow(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyTooSlow)
        return _slow_response(exc, request.url.path)

    app.add_exception_handler(BodyTooLarge, handle)
    app.add_exception_handler(BodyTooSlow, handle_slow)
    app.add_middleware(BodyLimitMiddleware)
