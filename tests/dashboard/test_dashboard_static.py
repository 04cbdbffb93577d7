"""The dashboard's pages and assets: served locally with the right types and a strict CSP,
referencing nothing outside the service, storing nothing, and with colours that keep their
contrast (recomputed here from the stylesheet, so a palette change cannot quietly break it)."""

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.dashboard.router import ASSETS, STATIC_DIR
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.main import create_app

PAGES = {"/dashboard": "index.html", "/dashboard/privacy": "privacy.html"}
ASSET_PATHS = {f"/dashboard/static/{name}": media for name, media in ASSETS.items()}


@pytest.fixture(scope="module")
def web() -> TestClient:
    """The app without a database: the dashboard's files need none."""
    return TestClient(create_app(embedded_worker=False))


def _csp(response_headers: object) -> dict[str, str]:
    header = response_headers["content-security-policy"]  # type: ignore[index]
    return {
        part.split()[0]: " ".join(part.split()[1:])
        for part in (p.strip() for p in header.split(";"))
        if part
    }


@pytest.mark.parametrize("path", list(PAGES))
def test_pages_are_html_with_a_strict_csp(web: TestClient, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    csp = _csp(response.headers)
    assert csp["default-src"] == "'self'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["form-action"] == "'none'" and csp["frame-ancestors"] == "'none'"
    assert "unsafe" not in response.headers["content-security-policy"]
    page = response.text
    assert page.startswith("<!DOCTYPE html>")
    assert '<html lang="en">' in page and '<meta charset="utf-8">' in page


@pytest.mark.parametrize(("path", "media"), list(ASSET_PATHS.items()))
def test_assets_have_their_media_types(web: TestClient, path: str, media: str) -> None:
    response = web.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == media
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/dashboard/static/../router.py", "/dashboard/static/x.js",
                                  "/dashboard/static/index.html"])
def test_only_listed_assets_are_served(web: TestClient, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 404
    assert "APIRouter" not in response.text


def _served_texts(web: TestClient) -> dict[str, str]:
    return {path: web.get(path).text for path in [*PAGES, *ASSET_PATHS]}


def test_nothing_external_is_referenced(web: TestClient) -> None:
    for path, text in _served_texts(web).items():
        # privacy.js strips a fetched report page's style element before parsing it: the one
        # place the word may appear, as the pattern that removes it.
        text = text.replace(r"const STYLE_ELEMENT = /<style\b[^>]*>[\s\S]*?<\/style>/gi;", "")
        assert not re.search(r"https?:", text, re.IGNORECASE), path
        assert not re.search(r"(src|href)=[\"']?//", text), path  # protocol-relative URLs
        if path.endswith(".css"):
            assert "@import" not in text and "url(" not in text, path
        assert "<style" not in text and "style=" not in text, path  # the CSP forbids them


def test_pages_load_only_the_local_module_and_stylesheet(web: TestClient) -> None:
    for path in PAGES:
        page = web.get(path).text
        scripts = re.findall(r"<script\b[^>]*>", page)
        assert len(scripts) == 1 and 'type="module"' in scripts[0], path
        assert re.search(r"<script[^>]*>\s*</script>", page), "no inline script"
        entry = "scoring.js" if path == "/dashboard" else "privacy.js"
        assert re.findall(r'src="([^"]+)"', page) == [
            ("dashboard/static/" if path == "/dashboard" else "static/") + entry
        ]
        assert re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)[0].endswith(
            "static/dashboard.css"
        )


def test_the_scripts_store_log_and_inject_nothing() -> None:
    """Nothing stored but the API key, in sessionStorage (this tab only), by common.js."""
    scripts = sorted(STATIC_DIR.glob("*.js"))
    assert {p.name for p in scripts} == {n for n in ASSETS if n.endswith(".js")}
    for path in scripts:
        script = path.read_text()
        if path.name == "common.js":
            uses = re.findall(r"sessionStorage\.(\w+)\(([^)]*)\)", script)
            assert {u[0] for u in uses} == {"getItem", "setItem", "removeItem"}, uses
            assert all(u[1].split(",")[0] == "KEY_STORAGE" for u in uses), uses
            script = re.sub(r"sessionStorage\.\w+\(KEY_STORAGE[^)]*\)", "", script)
        for forbidden in ("localStorage", "sessionStorage", "indexedDB", "document.cookie",
                          "console.", "innerHTML", "outerHTML", "insertAdjacentHTML", "eval(",
                          "sendBeacon", "new Function", "import("):
            assert forbidden not in script, (path.name, forbidden)
        for module in re.findall(r'from "([^"]+)"', script):  # only sibling files we serve
            assert module.startswith("./") and module[2:] in ASSETS, (path.name, module)


def test_every_static_control_has_a_label() -> None:
    page = (STATIC_DIR / "index.html").read_text()
    ids = re.findall(r"<(?:input|select|textarea)\b[^>]*\bid=\"([^\"]+)\"", page)
    labelled = set(re.findall(r'<label for="([^"]+)"', page))
    assert ids and set(ids) <= labelled


def _code(text: str) -> str:
    """A script without its comments (which may name a feature as an example)."""
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*[\s\S]*?\*/", "", text))


def test_no_schema_is_written_into_the_page() -> None:
    """The form, the CSV columns and the explanation labels come from the scoring model's
    declared schema at run time: no feature name, label or bound is in the page's files."""
    words = {f.name for f in BUILT_IN_SCHEMA.features}
    words |= {f.label for f in BUILT_IN_SCHEMA.features if f.label and len(f.label) > 3}
    texts = {p.name: _code(p.read_text()) for p in STATIC_DIR.glob("*.js")}
    texts["index.html"] = (STATIC_DIR / "index.html").read_text()
    for name, text in texts.items():
        for word in words:
            assert not re.search(rf"\b{re.escape(word)}\b", text), (name, word)
        assert "[0, 27]" not in text and "30 days" not in text, name


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours (1 to 21)."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


TEXT_PAIRS = [("ink", "paper"), ("ink", "panel"), ("muted", "paper"), ("muted", "panel"),
              ("link", "paper"), ("paper", "link"), ("error", "paper"), ("error", "error-bg"),
              ("low-ink", "low-bg"), ("medium-ink", "medium-bg"), ("high-ink", "high-bg"),
              ("raises", "paper"), ("lowers", "paper")]
NON_TEXT_PAIRS = [("focus", "paper"), ("rule", "paper"), ("raises", "paper"),
                  ("lowers", "paper"), ("ink", "medium-bg")]


def _palette(css: Path) -> dict[str, str]:
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{6})\s*;", css.read_text()))


def test_text_contrast_is_at_least_4_5_and_marks_3() -> None:
    palette = _palette(STATIC_DIR / "dashboard.css")
    for fg, bg in TEXT_PAIRS:
        assert contrast(palette[fg], palette[bg]) >= 4.5, (fg, bg)
    for fg, bg in NON_TEXT_PAIRS:
        assert contrast(palette[fg], palette[bg]) >= 3.0, (fg, bg)
    assert contrast("#767676", "#ffffff") >= 4.5  # the lightest grey used, as a sanity check
