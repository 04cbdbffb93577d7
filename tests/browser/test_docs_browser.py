"""``/docs`` (Swagger UI) renders with no network but the service's own: its script and style
come from /docs/static/, so the documentation works on a network without internet access
(``/redoc`` sends there). Every request that would leave the service is refused (and fails the
test)."""

from typing import Any

import pytest

from tests.browser.helpers import ARTIFACTS, skip_without_chromium

skip_without_chromium()

from playwright.sync_api import Page, Route, expect  # noqa: E402

pytestmark = pytest.mark.slow


def _offline(page: Page, base: str) -> list[str]:
    """Refuse every request that is not to the service; returns the ones refused."""
    refused: list[str] = []

    def route(route: Route) -> None:
        if route.request.url.startswith(base):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    page.route("**/*", route)
    return refused


def test_swagger_ui_renders_offline(service: dict[str, Any], page: Page) -> None:
    refused = _offline(page, service["base"])
    page.goto(f"{service['base']}/docs")
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
    assert page.locator(".opblock").count() > 20
    expect(page.locator(".opblock-summary-path", has_text="/v1/risk/fhir")).to_have_count(1)
    expect(page.locator(".info .title")).to_contain_text("dpcrisis")
    assert refused == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "docs-offline.png"))


def test_redoc_sends_to_the_offline_page(service: dict[str, Any], page: Page) -> None:
    refused = _offline(page, service["base"])
    page.goto(f"{service['base']}/redoc")
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
    assert page.url == f"{service['base']}/docs"
    assert refused == []
