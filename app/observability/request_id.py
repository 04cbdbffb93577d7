"""``X-Request-ID``: accepted from the caller (a gateway's id) or generated, echoed, logged.

The id is held in ``app.core.logs.request_id`` for the whole request, so every log
record written while handling it (route, service, error handler, uvicorn's access line) carries
it; the response echoes it so a client can quote it in a support ticket.
"""

import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.logs import request_id

HEADER = "X-Request-ID"
_VALID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
"""What a caller's id may look like: anything else (a newline, a 10 kB string) could forge or
flood log lines, so it is replaced by a fresh id."""


def resolve(incoming: str | None) -> str:
    """The caller's id when it is a safe token, else a new random one."""
    if incoming is not None and _VALID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Set the request id for the request's duration and echo it on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = resolve(Headers(scope=scope).get(HEADER))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        token = request_id.set(rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
