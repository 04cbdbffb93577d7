"""Every response header is standard HTTP or has a release-inventory entry (``header:<Name>``).

A header is a way to release a figure that no response schema shows (``X-Row-Count: 1203``).
The scan (``inventory_scans.response_headers``) reads every header set on a response in app/:
item assignments and ``update``/``setdefault`` on ``.headers``, ``headers=`` given to a
response or an exception, an exception's ``headers``, raw ASGI header lists. A name it cannot
read (a non-literal key) fails here with its place. Requests against the app check the same
at run time.
"""

import functools

import pytest
from fastapi.testclient import TestClient

from app.privacy import inventory
from app.privacy.inventory_http import standard_header
from tests.privacy.inventory_scans import Scan, response_headers, sources


@functools.cache
def scan() -> Scan:
    """The scan of app/, made once per test process by the first test that reads it (not at
    collection, where every test process would pay for it)."""
    return response_headers(sources("app"))


def _classified() -> set[str]:
    return {w.removeprefix("header:") for w in inventory.BY_WHERE if w.startswith("header:")}


def test_the_scan_sees_the_known_headers() -> None:
    assert {"Location", "Retry-After", "WWW-Authenticate", "Cache-Control", "Vary",
            "X-Request-ID", "Idempotency-Replayed"} <= set(scan().found)


def test_every_response_header_is_standard_or_names_its_release() -> None:
    assert not scan().unresolved, "header names the scan cannot read (use literals or a " \
        "module constant):\n" + "\n".join(scan().unresolved)
    missing = {name: where for name, where in scan().found.items()
               if not standard_header(name) and name not in _classified()}
    assert not missing, f"non-standard response headers without a header:<Name> entry: {missing}"


def test_no_header_entry_is_stale() -> None:
    stale = _classified() - set(scan().found)
    assert not stale, f"header:<Name> entries no response sets: {stale}"
    assert not {name for name in _classified() if standard_header(name)}


@pytest.mark.parametrize("path", ["/healthz", "/v1/privacy/inventory", "/v1/jobs/999999",
                                  "/v1/models", "/docs", "/openapi.json"])
def test_responses_carry_only_classified_headers(client: TestClient, path: str) -> None:
    response = client.get(path, headers={"X-Request-ID": "trace-1"})
    assert response.headers["X-Request-ID"] == "trace-1"
    unclassified = {name for name in response.headers
                    if not standard_header(name)
                    and name.lower() not in {c.lower() for c in _classified()}}
    assert not unclassified, unclassified
