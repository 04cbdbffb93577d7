"""CORS on ``/cds-services`` only: CDS Hooks clients may call from a browser (an EHR's web app
or a sandbox), so preflight ``OPTIONS`` requests are answered and responses carry the
``Access-Control-*`` headers there, for the origins ``DPCRISIS_CDS_CORS_ORIGINS`` allows. Every
other route is left as it was (no cross-origin access).

Calls authenticate with a bearer token, never a cookie, so credentials mode is off and ``*``
(the default) lets no site act with a user's ambient authority.
"""

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.settings import settings

PREFIX = "/cds-services"


class CdsHooksCors:
    """Starlette's ``CORSMiddleware`` for paths under ``PREFIX``; a pass-through elsewhere."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._built: tuple[tuple[str, ...], CORSMiddleware] | None = None

    def _cors(self, origins: tuple[str, ...]) -> CORSMiddleware:
        """The middleware for the configured origins (built again if they change)."""
        if self._built is None or self._built[0] != origins:
            self._built = (origins, CORSMiddleware(
                self.app, allow_origins=origins, allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Authorization", "Content-Type", "Accept", "X-Request-ID"],
                expose_headers=["X-Request-ID", "Location", "Content-Location"],
                allow_credentials=False, max_age=600,
            ))
        return self._built[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        origins = tuple(settings.dpcrisis_cds_cors_origins)
        if origins and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self._cors(origins)(scope, receive, send)
        else:
            await self.app(scope, receive, send)
