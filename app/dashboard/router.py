"""Dashboard routes: two static pages and their assets, all served from this package.

Nothing is fetched from elsewhere (no CDN, fonts or analytics) and the Content-Security-Policy
allows this origin only, with no inline script or style: patient features typed into the page
can reach nobody but this service's API, and an injected script could not send them further.
The pages are static files; small ES modules (no framework, no build step) build everything
from the API at run time.
"""

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.core.errors import NotFound

STATIC_DIR = Path(__file__).parent / "static"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate every time: a stale script talking to a newer API would mislead quietly.
    "Cache-Control": "no-cache",
}
_JS = "text/javascript; charset=utf-8"
ASSETS: dict[str, str] = {
    "dashboard.css": "text/css; charset=utf-8",
    "common.js": _JS,
    "scoring.js": _JS,
    "schema.js": _JS,
    "result.js": _JS,
    "chart.js": _JS,
    "batch.js": _JS,
    "csv.js": _JS,
    "privacy.js": _JS,
}
"""The only files served under /dashboard/static/ (an allow-list: no path is ever joined)."""

router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False)


def _file(name: str, media_type: str) -> FileResponse:
    return FileResponse(STATIC_DIR / name, media_type=media_type, headers=SECURITY_HEADERS)


@router.get("")
def scoring_page() -> FileResponse:
    """The scoring page: one patient by form, or several by CSV."""
    return _file("index.html", "text/html; charset=utf-8")


@router.get("/privacy")
def privacy_page() -> FileResponse:
    """The privacy page: dataset budgets and ledgers, models and their guarantees."""
    return _file("privacy.html", "text/html; charset=utf-8")


@router.get("/static/{name}")
def asset(name: str) -> FileResponse:
    """One of the dashboard's own assets (CSS, JS)."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"no dashboard asset named {name!r}")
    return _file(name, media_type)
