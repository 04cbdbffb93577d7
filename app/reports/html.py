"""Self-contained HTML report pages: one inline style, no script, nothing fetched.

A privacy officer opens these pages in a browser and prints or forwards them, so they carry no
script and fetch nothing: plots are inline SVG (``app.reports.svg_plot``), the style is one inline
block whose hash is the only style the Content-Security-Policy allows. Used by the ledger's
privacy reports and the privacy audit pages.

The markup lives in Jinja2 templates (``app/reports/templates/``), rendered by the one
environment ``ENV`` below: autoescape is on for every template (files and strings alike) and
undefined names raise. Python prepares plain values (numbers already formatted as strings,
``Link`` for a link, ``table`` for a data table) and the templates do the markup, so no value can
reach a page unescaped by a forgotten call. The only markup that enters a template from Python is
a chart's SVG, in ``chart_svg``.
"""

import base64
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any, NamedTuple, TypeGuard, TypeVar

from fastapi import Response
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup
from pydantic import BaseModel

from app.privacy.figures import epsilon_text
from app.reports import svg_plot
from app.reports.svg_plot import Chart

MISSING = "—"
ReportT = TypeVar("ReportT", bound=BaseModel)


class Link(NamedTuple):
    """A link in a table cell or a definition list; both parts are escaped by the template."""

    href: str
    text: str


def _escape(value: object) -> object:
    """Every ``{{ value }}``: escaped with ``html.escape`` (markup such as a macro's passes).

    Jinja's autoescape would escape too, with ``&#39;`` and ``&#34;`` for quotes; escaping here
    first keeps the pages' entities as they were (``&#x27;``, ``&quot;``). Autoescape stays on
    behind it, for whatever does not pass through here.
    """
    return value if hasattr(value, "__html__") else Markup(escape(str(value)))


ENV = Environment(
    loader=PackageLoader("app.reports", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    finalize=_escape,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.tests["link"] = lambda value: isinstance(value, Link)

# The style is a template too (no expressions in it); the page includes exactly this text.
STYLE = ENV.get_template("style.css").render()
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


def render(template: str, **context: Any) -> str:
    """A page template (one that extends ``base.html``, which needs ``title``) as a string."""
    return ENV.get_template(template).render(**context)


def negotiated(
    report: ReportT,
    *,
    html: bool,
    response: Response,
    render: Callable[[ReportT], str],
) -> ReportT | HTMLResponse:
    """A report as its page (``html``: the client prefers text/html) or as JSON (the route's
    response model serialises ``report``).

    The page is rendered from the same object, so it can never say what the JSON does not;
    either answer varies with ``Accept``.
    """
    if html:
        return page_response(render(report))
    response.headers["Vary"] = "Accept"
    return report


def page_response(page: str) -> HTMLResponse:
    """The page with headers that forbid external resources and keep caches per Accept."""
    return HTMLResponse(
        page,
        headers={
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Vary": "Accept",
        },
    )


def chart_svg(chart: Chart) -> Markup:
    """The chart as inline SVG, for the ``figure`` macro.

    The one place where Python hands markup to a template: ``svg_plot.render_svg`` escapes every
    text and attribute value it writes (labels, titles, colours, dash patterns) and formats the
    numbers itself, so its output is trusted here as it is.
    """
    return Markup(svg_plot.render_svg(chart))  # noqa: S704 - escaped by svg_plot, see above


def finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


INFINITY_LABEL = "∞ (non-private)"


def eps(value: Any, *, non_private: bool = False) -> str:
    """An epsilon, rounded up to 4 digits; non-private spend reads "∞ (non-private)"."""
    if non_private or (isinstance(value, float) and math.isinf(value)):
        return INFINITY_LABEL
    return epsilon_text(value, digits=4) if finite(value) else MISSING


def num(value: Any, fmt: str = ".4g") -> str:
    """A number (integers as they are), or a dash for a missing one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return format(value, fmt) if finite(value) else MISSING


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else MISSING


def table(
    caption: str,
    headers: Sequence[tuple[str, bool]],
    rows: Iterable[Sequence[Any]],
    alarms: Iterable[bool] | None = None,
) -> dict[str, Any]:
    """A data table for the ``data_table`` macro; ``headers`` are (label, numeric).

    Cells are text or ``Link``; a row whose ``alarms`` entry is true has every cell marked as an
    alarm (red, and the row says so in words).
    """
    headers, rows = list(headers), list(rows)
    flags = [False] * len(rows) if alarms is None else list(alarms)
    return {
        "caption": caption,
        "headers": headers,
        "rows": [
            {"alarm": alarm, "cells": [(cell, numeric) for cell, (_, numeric)
                                       in zip(row, headers, strict=True)]}
            for row, alarm in zip(rows, flags, strict=True)
        ],
    }
