"""The score output formats and how a request chooses one (``Accept``, RFC 9110 12.5.1).

Every format renders the one typed answer the scoring service builds (``RiskAnswer``), for a
single patient (``/v1/risk``), a batch (``/v1/risk/batch``), or both. A new format (HL7v2, say)
is one module of this package holding a ``Format`` (``app.core.plugins`` finds it); the scoring
routes, their 406 and their OpenAPI media types follow from ``FORMATS``.
"""

from typing import Any

import app.formats as package
from app.core.errors import DomainError
from app.core.negotiation import quality
from app.core.plugins import members
from app.formats.base import Format, Kind

__all__ = ["FORMATS", "Format", "Kind", "NotAcceptable", "choose", "offered", "openapi_content"]

PROBLEM = "application/problem+json"
"""A client that accepts only this names how it reads errors, not a format: it gets JSON."""


FORMATS: tuple[Format, ...] = tuple(members(package, Format, skip=("base", "registry")))
"""The formats, the default (JSON) first: it answers an absent Accept, ``*/*`` and ties."""


class NotAcceptable(DomainError):
    """406: the Accept header names no format this route renders."""

    status, kind, title = 406, "not-acceptable", "Not acceptable"


def offered(kind: Kind) -> list[Format]:
    return [f for f in FORMATS if f.offers(kind)]


def choose(accept: str | None, kind: Kind) -> Format:
    """The format ``accept`` prefers among those offered for ``kind`` (ties: the earlier).

    Raises:
        NotAcceptable: no offered format is acceptable (406, naming the ones there are).
    """
    ranked = [(quality(accept, f.media_type), -n, f) for n, f in enumerate(offered(kind))]
    (q, _), _, best = max(ranked, key=lambda r: (r[0][0], r[0][1], r[1]))
    if q <= 0 and quality(accept, PROBLEM) == (1.0, 2):
        return FORMATS[0]  # it names only the errors it reads: the default (RFC 9110 12.5.1)
    if q <= 0:
        allowed = ", ".join(f.media_type for f in offered(kind))
        raise NotAcceptable(f"Accept: {accept!r} names no format this route answers in",
                            field="Accept", allowed=allowed)
    return best


def openapi_content(kind: Kind) -> dict[int | str, dict[str, Any]]:
    """``responses=`` naming every media type ``kind`` is rendered in, and the 406."""
    content = {f.media_type: {"schema": {"type": "string", "description": f.description}}
               for f in offered(kind)[1:]}
    allowed = ", ".join(f.media_type for f in offered(kind))
    return {200: {"content": content,
                  "description": f"The answer in the media type Accept prefers: {allowed}"},
            406: {"description": f"Accept names none of {allowed}"}}
