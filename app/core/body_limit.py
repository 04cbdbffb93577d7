"""Request bodies larger than ``MAX_REQUEST_BYTES`` are refused with a 413 problem document.

Without a cap a client can make the API buffer and JSON-parse any amount of data (the largest
legitimate body, a 10,000-patient batch, is about 3 MB). A declared ``Content-Length`` over the
cap is refused before the app runs; a chunked body is counted while it streams in and refused
as soon as it passes the cap, so at most the cap plus one chunk is ever read.
"""

import re

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


def _response(exc: BodyTooLarge, path: str) -> JSONResponse:
    return problem(413, KIND, TITLE, str(exc.detail), path, max_bytes=exc.limit)


def _declared_length(scope: Scope) -> int | None:
    value = Headers(scope=scope).get("content-length")
    return int(value) if value is not None and value.isdigit() else None


UPLOAD_PATH = re.compile(r"^/v1/datasets/[^/]+/(data|patient-ids)/?$")


def _limit_for(scope: Scope) -> int:
    """A table upload or its patient ids (PUT, streamed to disk) have their own, larger limit
    (the ids' route caps its body by the dataset's rows as it arrives)."""
    if scope.get("method") == "PUT" and UPLOAD_PATH.match(scope["path"]):
        return settings.max_upload_bytes
    return settings.max_request_bytes


class BodyLimitMiddleware:
    """ASGI wrapper enforcing ``settings.max_request_bytes`` (read per request, so tests and
    operators can change it without rebuilding the app)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = _limit_for(scope)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _response(BodyTooLarge(limit), scope["path"])(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)  # the app's handler below answers it
            return message

        await self.app(scope, counting_receive, send)


def install_body_limit(app: FastAPI) -> None:
    """Add the middleware and the handler that shapes its 413 as problem+json."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyTooLarge)
        return _response(exc, request.url.path)

    app.add_exception_handler(BodyTooLarge, handle)
    app.add_middleware(BodyLimitMiddleware)
