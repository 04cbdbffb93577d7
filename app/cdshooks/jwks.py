"""The public keys of each allow-listed CDS client (``DPCRISIS_CDS_CLIENTS``).

Inline keys (``jwks``) are used as given. Keys at a ``jwks_url`` are fetched with a short
timeout and kept for ``TTL_SECONDS``; a token naming a key id the cached set lacks (the EHR
rotated its keys) refetches it, at most once per ``REFRESH_SECONDS`` per URL, so a stream of
made-up key ids cannot turn this service into a load on the EHR. A token's ``jku`` header is
never fetched: only the configured URL is trusted.
"""

import time
from typing import Any

import httpx

from app.core.errors import DomainError
from app.core.settings import CdsClient

TIMEOUT_SECONDS = 3.0
TTL_SECONDS = 3600.0
REFRESH_SECONDS = 60.0
MAX_BYTES = 256 * 1024

transport: httpx.AsyncBaseTransport | None = None
"""Tests put an ``httpx.MockTransport`` here; None: the network."""


class JwksUnavailable(DomainError):
    """The issuer's key set could not be fetched: the caller is not at fault (503)."""

    status, kind, title = 503, "jwks-unavailable", "CDS client keys unavailable"


_cache: dict[str, tuple[float, list[dict[str, Any]]]] = {}


def _keys_of(document: Any) -> list[dict[str, Any]]:
    keys = document.get("keys") if isinstance(document, dict) else None
    return [k for k in keys if isinstance(k, dict)] if isinstance(keys, list) else []


async def _fetch(url: str) -> list[dict[str, Any]]:
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, transport=transport,
                                     follow_redirects=False) as client:
            response = await client.get(url, headers={"Accept": "application/json"})
        if response.status_code != 200 or len(response.content) > MAX_BYTES:
            raise ValueError(f"HTTP {response.status_code}, {len(response.content)} bytes")
        return _keys_of(response.json())
    except (httpx.HTTPError, ValueError) as exc:
        raise JwksUnavailable(f"the JWK Set at {url} could not be read ({type(exc).__name__}); "
                              "retry shortly") from None


async def keys_for(client: CdsClient, kid: str | None) -> list[dict[str, Any]]:
    """The client's JWKs (all of them: the caller picks by ``kid``, ``kty`` and ``alg``).

    Raises:
        JwksUnavailable: a ``jwks_url`` that cannot be fetched and nothing cached (503).
    """
    if client.jwks is not None:
        return _keys_of(client.jwks)
    url = str(client.jwks_url)
    now = time.monotonic()
    cached = _cache.get(url)
    known = cached is not None and (kid is None or any(k.get("kid") == kid for k in cached[1]))
    fresh = cached is not None and now - cached[0] < TTL_SECONDS
    if cached is not None and (known and fresh or now - cached[0] < REFRESH_SECONDS):
        return cached[1]
    try:
        keys = await _fetch(url)
    except JwksUnavailable:
        if cached is not None:
            return cached[1]  # a stale set beats none while the EHR's endpoint is down
        raise
    _cache[url] = (now, keys)
    return keys


def forget() -> None:
    """Drop every cached key set (tests; a changed configuration)."""
    _cache.clear()
