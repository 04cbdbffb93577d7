"""The interactive API documentation (``/docs``: Swagger UI), served whole by this service.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from Google), so on
a hospital network without internet access ``/docs`` was a blank page. The page here loads its
script and style from ``/docs/static/``: the files the ``fastapi-offline`` wheel ships (Swagger
UI 5, which reads OpenAPI 3.1 as FastAPI writes it), served from an allow-list, so no path from
a request is ever joined to a directory. Swagger UI's online validator is off: the page sends
the document nowhere. ``/redoc`` sends to ``/docs``: ReDoc's page fetches its logo from its
vendor's CDN whatever its options, so it cannot be served offline as it is.
"""

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

from app.core.errors import NotFound

ASSET_DIR = Path(str(files("fastapi_offline") / "static"))
STATIC = "/docs/static"
ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}
"""The only files served under /docs/static/."""
SWAGGER_UI_PARAMETERS = {"validatorUrl": None, "defaultModelsExpandDepth": 0}
"""No online validator (nothing leaves the page); schemas collapsed under the operations."""


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/docs/oauth2-redirect`` and their assets, and send ``/redoc`` to
    ``/docs`` (none of them in OpenAPI).

    The app must be built with ``docs_url=None, redoc_url=None`` (FastAPI's CDN pages off).
    """
    router = APIRouter(include_in_schema=False)
    openapi_url = app.openapi_url or "/openapi.json"

    @router.get("/docs")
    def swagger_ui(request: Request) -> HTMLResponse:
        """Swagger UI over this service's OpenAPI document."""
        root = _root(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} API",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            swagger_js_url=f"{root}{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC}/favicon.png",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )

    @router.get("/docs/oauth2-redirect")
    def swagger_ui_redirect() -> HTMLResponse:
        """Swagger UI's OAuth2 redirect page (inline script only)."""
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc")
    def redoc(request: Request) -> RedirectResponse:
        """FastAPI's other documentation page: the same document, at /docs."""
        return RedirectResponse(f"{_root(request)}/docs")

    @router.get(f"{STATIC}/{{name}}")
    def docs_asset(name: str) -> FileResponse:
        """One of the documentation pages' assets."""
        media_type = ASSETS.get(name)
        if media_type is None:
            raise NotFound(f"no documentation asset named {name!r}")
        return FileResponse(ASSET_DIR / name, media_type=media_type,
                            headers={"Cache-Control": "public, max-age=3600",
                                     "X-Content-Type-Options": "nosniff"})

    app.include_router(router)
