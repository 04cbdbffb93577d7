"""Self-contained HTML report pages: one inline style, no script, nothing fetched.

A privacy officer opens these pages in a browser and prints or forwards them, so they carry no
script and fetch nothing: plots are inline SVG (``app.reports.svg_plot``), the style is one inline
block whose hash is the only style the Content-Security-Policy allows, and every value passes
through ``html.escape``. Used by the ledger's privacy reports and the privacy audit pages.
"""

import base64
import hashlib
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any

from fastapi.responses import HTMLResponse

from app.reports import svg_plot
from app.reports.svg_plot import Chart

MISSING = "—"
NUM_CLASS = ' class="num"'

STYLE = """
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#fff;max-width:62rem;margin:0 auto;padding:1.5rem}
h1{font-size:1.6rem;margin:0 0 .25rem} h3{font-size:1.05rem;margin-bottom:.25rem}
h2{font-size:1.25rem;border-bottom:2px solid #0072B2;padding-bottom:.15rem;margin-top:2rem}
a{color:#0a58a5} .sub{color:#444;margin-top:0} .big{font-size:1.5rem;font-weight:700}
.summary{border:2px solid #1a1a1a;padding:.75rem 1rem;margin:1rem 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}
dl.facts dt{font-weight:600} dl.facts dd{margin:0}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem;font-variant-numeric:tabular-nums}
caption{text-align:left;font-weight:600;padding:.25rem 0}
th,td{border:1px solid #8a8a8a;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0} .num{text-align:right} figure{margin:1rem 0}
svg.chart{max-width:100%;height:auto} figcaption,.note{color:#444;font-size:.9rem}
footer{margin-top:2rem;border-top:1px solid #8a8a8a;color:#444;font-size:.9rem}
.alarm{color:#b00020;border-color:#b00020;font-weight:700}
@page{margin:15mm}
@media print{body{max-width:none;padding:0;font-size:10pt} a{color:inherit} table{font-size:9pt}
figure,tr,.summary,dl{break-inside:avoid} h2,h3{break-after:avoid}}
""".strip()

_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)


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


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def num(value: Any, fmt: str = ".4g") -> str:
    """A number (integers as they are), or a dash for a missing one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return escape(str(value))
    return escape(format(value, fmt)) if finite(value) else MISSING


def when(value: datetime | None) -> str:
    return escape(value.strftime("%Y-%m-%d %H:%M:%S UTC")) if value else MISSING


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def facts(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list; values are already-escaped HTML."""
    items = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="facts">{items}</dl>'


def bullet_list(items: Iterable[str]) -> str:
    lis = "".join(f"<li>{escape(item)}</li>" for item in items)
    return f"<ul>{lis}</ul>" if lis else "<p>None.</p>"


def table(caption: str, headers: Sequence[tuple[str, bool]], rows: Iterable[Sequence[str]]) -> str:
    """A data table; ``headers`` are (label, numeric) and cells are already-escaped HTML."""
    head = "".join(
        f'<th scope="col"{NUM_CLASS if numeric else ""}>{escape(label)}</th>'
        for label, numeric in headers
    )
    body = []
    for row in rows:
        cells = "".join(
            f"<td{NUM_CLASS if numeric else ''}>{cell}</td>"
            for cell, (_, numeric) in zip(row, headers, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}">No rows yet.</td></tr>')
    return (
        f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def figure(chart: Chart, caption: str) -> str:
    return (
        f"<figure>{svg_plot.render_svg(chart)}<figcaption>{escape(caption)}</figcaption></figure>"
    )


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"{body}\n<footer><p>Generated by the dpcrisis service. The same report is served as "
        "JSON to requests that accept <code>application/json</code>.</p></footer>\n"
        "</body>\n</html>\n"
    )
