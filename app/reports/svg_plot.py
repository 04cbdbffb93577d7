"""Small line and step charts rendered as inline SVG on the server.

Why not a plotting library: the privacy reports must be self-contained pages (no scripts, no
external resources, a strict Content-Security-Policy) and the service takes no new dependency
for a handful of lines and ticks. Charts are accessible (``role="img"``, a ``<title>`` and a
``<desc>``); callers put the same data in a ``<table>`` beside the chart. Every label, title,
colour and dash pattern is escaped with ``html.escape`` where it enters the SVG string.

Text is 14 px at the chart's natural width (tick labels, axis labels, legend), so that it stays
legible when a page scales the chart down or prints it. Two reference lines closer than
``MERGE_PX`` pixels would be drawn as one: they are, with one legend entry naming both.

Missing values (None, NaN) are skipped. A value of +infinity (a non-private spend is
epsilon = infinity) never stretches an axis: it is drawn off the scale, as an upward triangle
on the top edge marked "∞", and the caller says so in words and in its table.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal, TypeGuard

from app.reports.svg_ticks import format_tick, nice_step, nice_ticks

__all__ = ["Chart", "Reference", "Series", "finite_points", "format_tick", "merged_references",
           "nice_step", "nice_ticks", "off_scale_points", "render_svg"]

Marker = Literal["circle", "square", "triangle", "none"]
Shape = Literal["linear", "step-after", "step-before"]

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
REFERENCE_COLOR = "#333333"
FONT_SIZE = 14  # px, every text of the chart
_CHAR_WIDTH = 7.8  # average glyph width at 14px, to lay out legend entries without a renderer
MERGE_PX = 6.0
"""Reference lines closer than this (in pixels) are drawn as one, their labels joined."""


@dataclass(frozen=True)
class Series:
    """One line of (x, y) points.

    ``shape``: ``linear`` joins points; ``step-after`` holds each value until the next x;
    ``step-before`` reaches each value at the previous x, so the last value has a plateau too.
    ``dash`` is an SVG ``stroke-dasharray`` ("" for a solid line). ``legend=False`` leaves the
    series out of the legend: a part of another series' mark (an interval's whisker).
    """

    label: str
    points: Sequence[tuple[float | None, float | None]]
    color: str = PALETTE[0]
    shape: Shape = "linear"
    dash: str = ""
    marker: Marker = "circle"
    legend: bool = True


@dataclass(frozen=True)
class Reference:
    """A horizontal line across the plot, such as a budget or a target epsilon."""

    label: str
    y: float
    color: str = REFERENCE_COLOR
    dash: str = "6 4"


@dataclass(frozen=True)
class Chart:
    """What to draw; ``x_domain``/``y_domain`` force ranges (else they fit the finite data).

    ``y_from_zero`` keeps 0 on the y axis, so spends are never exaggerated by a cut axis.

    ``chart_id`` prefixes the element ids so two charts can share one page.
    """

    chart_id: str
    title: str
    x_label: str
    y_label: str
    series: Sequence[Series] = ()
    references: Sequence[Reference] = ()
    description: str = ""
    empty_message: str = "No data yet"
    off_scale_label: str = "∞ (off the scale)"
    x_domain: tuple[float, float] | None = None
    y_domain: tuple[float, float] | None = None
    x_integer: bool = False
    y_from_zero: bool = True
    width: int = 720
    height: int = 380
    margin: tuple[int, int, int, int] = field(default=(20, 24, 60, 76))  # top right bottom left


def finite_points(
    points: Sequence[tuple[float | None, float | None]],
) -> list[tuple[float, float]]:
    """The points whose coordinates are both finite numbers (None, inf and NaN are dropped)."""
    return [(float(x), float(y)) for x, y in points if _finite(x) and _finite(y)]


def off_scale_points(points: Sequence[tuple[float | None, float | None]]) -> list[float]:
    """The x of every point whose y is +infinity (drawn on the top edge, not on the scale)."""
    return [
        float(x) for x, y in points if _finite(x) and isinstance(y, float) and y == math.inf
    ]


def _finite(value: float | None) -> TypeGuard[float]:
    return isinstance(value, int | float) and math.isfinite(value)


def _domain(values: list[float], forced: tuple[float, float] | None) -> tuple[float, float]:
    if forced is not None:
        lo, hi = forced
    elif values:
        lo, hi = min(values), max(values)
    else:
        lo, hi = 0.0, 1.0
    if math.isclose(lo, hi):
        pad = abs(lo) * 0.5 or 1.0
        lo, hi = lo - pad, hi + pad
    return lo, hi


class _Scale:
    """Maps a data interval onto a pixel interval (y pixels grow downwards, so callers flip)."""

    def __init__(self, lo: float, hi: float, start: float, end: float) -> None:
        self.lo, self.hi, self.start, self.end = lo, hi, start, end

    def __call__(self, value: float) -> float:
        return self.start + (value - self.lo) / (self.hi - self.lo) * (self.end - self.start)


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _path(points: list[tuple[float, float]], shape: Shape) -> str:
    x0, y0 = points[0]
    parts = [f"M{_fmt(x0)} {_fmt(y0)}"]
    for x, y in points[1:]:
        if shape == "step-after":
            parts.append(f"H{_fmt(x)} V{_fmt(y)}")
        elif shape == "step-before":
            parts.append(f"V{_fmt(y)} H{_fmt(x)}")
        else:
            parts.append(f"L{_fmt(x)} {_fmt(y)}")
    return " ".join(parts)


def _dash(dash: str) -> str:
    return f' stroke-dasharray="{escape(dash)}"' if dash else ""


def _marker(kind: Marker, x: float, y: float, color: str, tooltip: str, css: str) -> str:
    label, color = f"<title>{escape(tooltip)}</title>", escape(color)
    if kind == "square":
        return (
            f'<rect class="{css}" x="{_fmt(x - 3.5)}" y="{_fmt(y - 3.5)}" width="7" height="7" '
            f'fill="{color}">{label}</rect>'
        )
    if kind == "triangle":
        return (
            f'<path class="{css}" d="M{_fmt(x - 5)} {_fmt(y + 4)} L{_fmt(x + 5)} {_fmt(y + 4)} '
            f'L{_fmt(x)} {_fmt(y - 4)} Z" fill="{color}">{label}</path>'
        )
    if kind == "circle":
        return (
            f'<circle class="{css}" cx="{_fmt(x)}" cy="{_fmt(y)}" r="3.5" fill="{color}">'
            f"{label}</circle>"
        )
    return ""


def merged_references(
    references: Sequence[Reference], pixel: Callable[[float], float]
) -> list[Reference]:
    """The finite references, those within ``MERGE_PX`` of the previous one (in pixels, by
    ``pixel``) folded into it: one line, in the first one's style, labelled with both."""
    merged: list[Reference] = []
    for ref in sorted((r for r in references if _finite(r.y)), key=lambda r: r.y):
        last = merged[-1] if merged else None
        if last is not None and abs(pixel(ref.y) - pixel(last.y)) < MERGE_PX:
            merged[-1] = Reference(f"{last.label} and {ref.label}", last.y, last.color,
                                   last.dash)
        else:
            merged.append(ref)
    return merged


def _legend(
    chart: Chart, references: Sequence[Reference], top: float, off_scale: bool
) -> tuple[list[str], float]:
    """Legend entries laid out left to right, wrapping; returns the elements and their height."""
    items: list[tuple[str, str, str | None, Marker]] = [
        (s.label, s.color, s.dash, s.marker) for s in chart.series if s.legend
    ]
    items += [(r.label, r.color, r.dash, "none") for r in references]
    if off_scale:  # a marker without a line
        items.append((chart.off_scale_label, REFERENCE_COLOR, None, "triangle"))
    left = chart.margin[3]
    x: float = left
    y, row_height = top, FONT_SIZE + 8.0
    out = ['<g class="legend">']
    for label, color, dash, marker in items:
        width = 34 + len(label) * _CHAR_WIDTH + 18
        if x + width > chart.width - chart.margin[1] and x > left:
            x, y = left, y + row_height
        if dash is not None:
            out.append(
                f'<line x1="{_fmt(x)}" y1="{_fmt(y)}" x2="{_fmt(x + 26)}" y2="{_fmt(y)}" '
                f'stroke="{escape(color)}" stroke-width="2"{_dash(dash)}/>'
            )
        out.append(_marker(marker, x + 13, y, color, label, "legend-marker"))
        out.append(f'<text x="{_fmt(x + 32)}" y="{_fmt(y + 5)}">{escape(label)}</text>')
        x += width
    out.append("</g>")
    return out, (y - top) + row_height if items else 0.0


def _layout(
    chart: Chart,
    drawn: list[tuple[Series, list[tuple[float, float]]]],
    off_scale: list[list[float]],
) -> tuple[float, float, float, float, list[float], list[float]]:
    """x and y ranges (forced, else the finite data widened to the outer ticks) and the ticks."""
    xs = [x for _, pts in drawn for x, _ in pts] + [x for xs_ in off_scale for x in xs_]
    ys = [y for _, pts in drawn for _, y in pts] + [
        r.y for r in chart.references if _finite(r.y)
    ]
    if chart.y_from_zero and ys:
        ys.append(0.0)
    x_lo, x_hi = _domain(xs, chart.x_domain)
    y_lo, y_hi = _domain(ys, chart.y_domain)
    x_ticks = nice_ticks(x_lo, x_hi, 8, integer=chart.x_integer)
    y_ticks = nice_ticks(y_lo, y_hi, 6)
    if chart.x_domain is None:
        x_lo, x_hi = x_ticks[0], x_ticks[-1]
    if chart.y_domain is None:
        y_lo, y_hi = y_ticks[0], y_ticks[-1]
    x_ticks = [t for t in x_ticks if x_lo - 1e-9 <= t <= x_hi + 1e-9]
    y_ticks = [t for t in y_ticks if y_lo - 1e-9 <= t <= y_hi + 1e-9]
    return x_lo, x_hi, y_lo, y_hi, x_ticks, y_ticks


def render_svg(chart: Chart) -> str:
    """The chart as an ``<svg>`` element string (no XML declaration, ready to inline in HTML).

    Every text and attribute value that comes from the chart goes through ``html.escape`` here
    (numbers are formatted by this module), so the string is safe to inline as it is: the report
    pages wrap it in ``Markup`` in one place, ``app.reports.html.chart_svg``.
    """
    drawn = [(s, finite_points(s.points)) for s in chart.series]
    off_scale = [off_scale_points(s.points) for s in chart.series]
    has_data = any(pts for _, pts in drawn) or any(off_scale)
    x_lo, x_hi, y_lo, y_hi, x_ticks, y_ticks = _layout(chart, drawn, off_scale)

    top, right, bottom, left = chart.margin
    plot_bottom = chart.height - bottom
    sx = _Scale(x_lo, x_hi, left, chart.width - right)
    sy = _Scale(y_lo, y_hi, plot_bottom, top)
    references = merged_references(
        [r for r in chart.references if _finite(r.y) and y_lo <= r.y <= y_hi], sy)
    legend, legend_height = _legend(chart, references, chart.height + 8, any(off_scale))
    total_height = chart.height + legend_height + 8

    cid = escape(chart.chart_id)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{cid}" role="img" '
        f'viewBox="0 0 {chart.width} {_fmt(total_height)}" width="{chart.width}" '
        f'height="{_fmt(total_height)}" aria-labelledby="{cid}-title" '
        f'aria-describedby="{cid}-desc" font-family="system-ui, sans-serif" '
        f'font-size="{FONT_SIZE}">',
        f'<title id="{cid}-title">{escape(chart.title)}</title>',
        f'<desc id="{cid}-desc">{escape(chart.description or chart.title)}</desc>',
        f'<rect x="{left}" y="{top}" width="{chart.width - left - right}" '
        f'height="{plot_bottom - top}" fill="#ffffff" stroke="#cccccc"/>',
    ]
    out += _axes(chart, sx, sy, x_ticks, y_ticks)
    for ref in references:
        out.append(
            f'<line class="reference" x1="{left}" x2="{chart.width - right}" '
            f'y1="{_fmt(sy(ref.y))}" y2="{_fmt(sy(ref.y))}" stroke="{escape(ref.color)}" '
            f'stroke-width="1.5"{_dash(ref.dash)}><title>{escape(ref.label)}: '
            f"{ref.y:.4g}</title></line>"
        )
    for index, (series, pts) in enumerate(drawn):
        out += _series(series, index, pts, sx, sy)
        out += _off_scale(series, index, off_scale[index], sx, top)
    if not has_data:
        out.append(
            f'<text class="empty" x="{_fmt((left + chart.width - right) / 2)}" '
            f'y="{_fmt((top + plot_bottom) / 2)}" text-anchor="middle" font-size="16" '
            f'fill="#333333">{escape(chart.empty_message)}</text>'
        )
    out += legend
    out.append("</svg>")
    return "\n".join(out)


def _axes(
    chart: Chart, sx: _Scale, sy: _Scale, x_ticks: list[float], y_ticks: list[float]
) -> list[str]:
    top, right, bottom, left = chart.margin
    plot_bottom = chart.height - bottom
    x_step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else 1.0
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else 1.0
    out = ['<g class="axis x-axis" fill="#222222">']
    for t in x_ticks:
        x = _fmt(sx(t))
        out.append(
            f'<line x1="{x}" x2="{x}" y1="{plot_bottom}" y2="{plot_bottom + 5}" stroke="#222222"/>'
            f'<text class="tick" x="{x}" y="{plot_bottom + 20}" text-anchor="middle">'
            f"{escape(format_tick(t, x_step))}</text>"
        )
    out.append(
        f'<text class="axis-label" x="{_fmt((left + chart.width - right) / 2)}" '
        f'y="{chart.height - 14}" text-anchor="middle">{escape(chart.x_label)}</text></g>'
    )
    out.append('<g class="axis y-axis" fill="#222222">')
    for t in y_ticks:
        y = _fmt(sy(t))
        out.append(
            f'<line x1="{left - 5}" x2="{chart.width - right}" y1="{y}" y2="{y}" '
            f'stroke="#e6e6e6"/><line x1="{left - 5}" x2="{left}" y1="{y}" y2="{y}" '
            f'stroke="#222222"/><text class="tick" x="{left - 8}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{escape(format_tick(t, y_step))}</text>'
        )
    middle = _fmt((top + plot_bottom) / 2)
    out.append(
        f'<text class="axis-label" x="16" y="{middle}" text-anchor="middle" '
        f'transform="rotate(-90 16 {middle})">{escape(chart.y_label)}</text></g>'
    )
    return out


def _series(
    series: Series, index: int, pts: list[tuple[float, float]], sx: _Scale, sy: _Scale
) -> list[str]:
    if not pts:
        return []
    pts = sorted(pts)
    pixels = [(sx(x), sy(y)) for x, y in pts]
    color = series.color
    out = [f'<g class="series series-{index}" data-label="{escape(series.label)}">']
    if len(pixels) > 1:
        out.append(
            f'<path d="{_path(pixels, series.shape)}" fill="none" stroke="{escape(color)}" '
            f'stroke-width="2"{_dash(series.dash)}/>'
        )
    for (x, y), (px, py) in zip(pts, pixels, strict=True):
        tooltip = f"{series.label}: x = {x:g}, y = {y:.4g}"
        out.append(_marker(series.marker, px, py, color, tooltip, "point"))
    out.append("</g>")
    return out


def _off_scale(series: Series, index: int, xs: list[float], sx: _Scale, top: float) -> list[str]:
    """Infinite values: an upward triangle on the top edge with an "∞" under it."""
    out = []
    for x in xs:
        px = sx(x)
        tooltip = f"{series.label}: x = {x:g}, y = ∞ (off the scale)"
        out.append(
            f'<g class="off-scale series-{index}">'
            f"{_marker('triangle', px, top + 5, series.color, tooltip, 'off-scale-marker')}"
            f'<text x="{_fmt(px - 8)}" y="{_fmt(top + 10)}" text-anchor="end" fill="#222222">'
            "∞</text></g>"
        )
    return out
