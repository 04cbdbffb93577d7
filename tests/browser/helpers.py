"""Steps the dashboard's browser tests share: open a page with a key, fill the form, run axe."""

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(tempfile.gettempdir()) / "dpcrisis-screenshots"
"""Where the browser tests leave their screenshots for a person to look at: the system's
temporary folder, not the working tree."""


def skip_without_chromium() -> None:
    """Skip the calling test module where Debian's chromium is missing (CI installs it)."""
    if not CHROMIUM.exists() and not os.environ.get("CI"):
        pytest.skip(
            f"{CHROMIUM} is missing (apt-get install chromium); CI installs it and runs this "
            "test", allow_module_level=True,
        )


def percent(p: float) -> str:
    """What the page shows for a probability (common.js percent())."""
    return f"{p * 100:.2g} %" if 0 < p < 0.01 else f"{p * 100:.1f} %"


def open_page(page: Page, url: str, key: str) -> None:
    """Open a dashboard page in a fresh tab: paste the key, press Enter, wait for the data."""
    page.goto(url)
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")  # stores the key for this tab and reloads
    page.wait_for_selector("body[data-ready='true']")


def tab_to(page: Page, element_id: str, limit: int = 20) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == element_id:
            return
    pytest.fail(f"Tab never reached #{element_id}")


def fill_patient(page: Page, values: dict[str, Any]) -> None:
    """Set every field of the form: selects (binary, categorical) by value, numbers by text."""
    for name, value in values.items():
        control = f"#f-{name}"
        if page.locator(control).evaluate("e => e.tagName") == "SELECT":
            page.select_option(control, str(value))
        else:
            page.fill(control, str(value))


def assert_accessible(page: Page, where: str) -> None:
    """axe-core (the copy in axe-playwright-python) finds no violation on the page as it is.

    The script is evaluated by the test driver, not loaded by the page, so the page's CSP
    (scripts from this origin only) stays as it is.
    """
    if not os.environ.get("CI"):
        pytest.importorskip("axe_playwright_python")
    from axe_playwright_python.base import AXE_SCRIPT

    page.evaluate(AXE_SCRIPT)
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    violations = [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + ", ".join(" ".join(n["target"]) for n in v["nodes"])
        for v in result["violations"]
    ]
    assert not violations, (where, violations)
