"""Content negotiation between JSON (the API's default) and HTML pages for browsers.

Per RFC 9110 section 12.5.1 each media type gets the quality of the most specific Accept range
that matches it. HTML wins only when it is named (``text/html`` or ``text/*``), acceptable
(q > 0) and at least as preferred as ``application/json``: a bare ``*/*`` (curl, HTTP clients)
keeps JSON, while a browser's ``text/html,...,*/*;q=0.8`` gets the page.
"""

from typing import Annotated

from fastapi import Depends, Header

HTML = "text/html"
JSON = "application/json"


def _parse(accept: str) -> list[tuple[str, str, float]]:
    """(type, subtype, q) for every well-formed media range; malformed ones are ignored."""
    ranges = []
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.count("/") != 1:
            continue
        kind, subtype = (p.lower() for p in media.split("/"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        ranges.append((kind, subtype, q))
    return ranges


def quality(accept: str | None, media_type: str) -> tuple[float, int]:
    """The q given to ``media_type`` and how specific its match was (2 exact, 1 type/*, 0 */*).

    An absent or empty header accepts everything (q = 1, specificity 0); a type that no range
    matches gets (0, -1).
    """
    if accept is None or not accept.strip():
        return 1.0, 0
    kind, subtype = media_type.split("/")
    best: tuple[int, float] | None = None
    for r_kind, r_subtype, q in _parse(accept):
        if (r_kind, r_subtype) == (kind, subtype):
            specificity = 2
        elif r_kind == kind and r_subtype == "*":
            specificity = 1
        elif (r_kind, r_subtype) == ("*", "*"):
            specificity = 0
        else:
            continue
        if best is None or specificity > best[0]:
            best = (specificity, q)
    if best is None:
        return 0.0, -1
    return best[1], best[0]


def html_preferred(accept: str | None) -> bool:
    """True when the Accept header names HTML with a q above 0 and not below JSON's."""
    html_q, html_specificity = quality(accept, HTML)
    json_q, _ = quality(accept, JSON)
    return html_specificity >= 1 and html_q > 0 and html_q >= json_q


def prefers_html(accept: Annotated[str | None, Header()] = None) -> bool:
    """Dependency: whether this request should get the HTML rendering of a resource."""
    return html_preferred(accept)


PrefersHtml = Annotated[bool, Depends(prefers_html)]

# OpenAPI: routes that negotiate add the page beside the JSON body their response_model
# documents. They also name response_class=JSONResponse: the report is then written by json.dumps
# as it always was, not by pydantic's JSON writer (same values, other digits: 1e-05 as 0.00001).
REPORT_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {
        "description": "The report: JSON by default, an HTML page when Accept prefers text/html",
        "content": {HTML: {"schema": {"type": "string"}}},
    }
}
