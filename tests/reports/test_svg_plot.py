"""The inline-SVG chart module: ticks, scaling, escaping, and data with gaps or infinities."""

import math
import re
import xml.etree.ElementTree as ET

import pytest

from app.reports.svg_plot import (
    Chart,
    Reference,
    Series,
    finite_points,
    format_tick,
    nice_step,
    nice_ticks,
    off_scale_points,
    render_svg,
)

SVG = "{http://www.w3.org/2000/svg}"


def _chart(**overrides: object) -> Chart:
    fields: dict[str, object] = {
        "chart_id": "c1",
        "title": "Epsilon per epoch",
        "x_label": "epoch",
        "y_label": "epsilon",
        "series": [Series("PRV", [(1, 1.0), (2, 1.5), (3, 2.0)])],
    }
    fields.update(overrides)
    return Chart(**fields)  # type: ignore[arg-type]


def _parse(svg: str) -> ET.Element:
    """The SVG must be well-formed XML on its own (it is also valid inline in HTML5)."""
    return ET.fromstring(svg)


def _points(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter() if "point" in (e.get("class") or "").split()]


def _ticks(root: ET.Element, axis: str) -> list[str]:
    group = next(g for g in root.iter(f"{SVG}g") if axis in (g.get("class") or ""))
    return [t.text or "" for t in group.iter(f"{SVG}text") if t.get("class") == "tick"]


@pytest.mark.parametrize(
    ("lo", "hi", "integer", "expected"),
    [
        (0, 2.97, False, [0, 1, 2, 3]),
        (0, 10, False, [0, 2, 4, 6, 8, 10]),
        (0, 1, True, [0, 1]),
        (0, 3, True, [0, 1, 2, 3]),
        (0, 0.55, False, [0, 0.2, 0.4, 0.6]),
        (0.3, 0.31, False, [0.3, 0.3025, 0.305, 0.3075, 0.31]),
    ],
)
def test_nice_ticks_are_round_and_cover_the_range(
    lo: float, hi: float, integer: bool, expected: list[float]
) -> None:
    ticks = nice_ticks(lo, hi, 6 if not integer else 8, integer=integer)
    assert ticks == pytest.approx(expected)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert all(repr(t) == repr(float(f"{t:.10g}")) for t in ticks)  # no 0.30000000000000004


def test_integer_axes_never_tick_between_whole_numbers() -> None:
    for hi in (1, 2, 3, 7, 12, 37, 250):
        step = nice_step(hi, 8, integer=True)
        assert step >= 1 and step == int(step)


def test_tick_labels_have_just_enough_decimals() -> None:
    assert [format_tick(t, 0.25) for t in (0, 0.25, 0.5)] == ["0.00", "0.25", "0.50"]
    assert format_tick(2.0, 1.0) == "2"
    assert format_tick(0.2, 0.1) == "0.2"


def test_points_are_scaled_into_the_plot_area() -> None:
    chart = _chart(
        series=[Series("s", [(5, 50.0)])], x_domain=(0, 10), y_domain=(0, 100),
        width=600, height=300, margin=(20, 20, 40, 60),
    )
    root = _parse(render_svg(chart))
    (point,) = _points(root)
    assert float(point.get("cx", "nan")) == pytest.approx(60 + 0.5 * (600 - 60 - 20), abs=0.1)
    assert float(point.get("cy", "nan")) == pytest.approx(20 + 0.5 * (300 - 20 - 40), abs=0.1)


def test_chart_is_accessible_with_axes_ticks_and_legend() -> None:
    svg = render_svg(
        _chart(references=[Reference("target 3", 3.0)], x_domain=(0, 3), x_integer=True)
    )
    root = _parse(svg)
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "c1-title"
    assert root.find(f"{SVG}title").text == "Epsilon per epoch"  # type: ignore[union-attr]
    assert _ticks(root, "x-axis") == ["0", "1", "2", "3"]
    assert _ticks(root, "y-axis")[0] == "0" and len(_ticks(root, "y-axis")) >= 3
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "axis-label"]
    assert labels == ["epoch", "epsilon"]
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    assert [t.text for t in legend.iter(f"{SVG}text")] == ["PRV", "target 3"]
    assert len(_points(root)) == 3
    assert 'class="reference"' in svg


def test_labels_are_escaped() -> None:
    hostile = '<script>alert("x")</script> & co'
    svg = render_svg(
        _chart(
            chart_id='c"2', title=hostile, x_label=hostile, y_label=hostile,
            series=[Series(hostile, [(1, 1.0)])], references=[Reference(hostile, 1.0)],
        )
    )
    assert "<script" not in svg and 'c"2' not in svg
    root = _parse(svg)
    assert root.find(f"{SVG}title").text == hostile  # type: ignore[union-attr]


def test_empty_chart_says_so_and_still_draws_axes() -> None:
    root = _parse(render_svg(_chart(series=[Series("PRV", [])], empty_message="No epochs yet")))
    assert _points(root) == []
    assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "empty"] == [
        "No epochs yet"
    ]
    assert _ticks(root, "x-axis") and _ticks(root, "y-axis")


def test_a_single_point_gets_a_sane_axis_and_no_line() -> None:
    svg = render_svg(_chart(series=[Series("PRV", [(1, 2.5)])]))
    root = _parse(svg)
    assert len(_points(root)) == 1
    assert not re.search(r"\b(nan|inf)\b", svg.lower())
    assert not [p for p in root.iter(f"{SVG}path") if p.get("fill") == "none"]
    ticks = [float(t) for t in _ticks(root, "y-axis")]
    assert ticks[0] == 0 and ticks[-1] >= 2.5


def test_infinite_values_are_drawn_off_scale_without_stretching_the_axis() -> None:
    points = [(1, 1.0), (2, 2.0), (3, math.inf), (4, None)]
    assert finite_points(points) == [(1.0, 1.0), (2.0, 2.0)]
    assert off_scale_points(points) == [3.0]
    chart = _chart(
        series=[Series("spend", points)], off_scale_label="∞: non-private", x_integer=True
    )
    svg = render_svg(chart)
    root = _parse(svg)
    assert len(_points(root)) == 2
    assert max(float(t) for t in _ticks(root, "y-axis")) <= 2.5
    assert _ticks(root, "x-axis")[-1] == "3"  # the infinite point's x counts, a None one not
    assert svg.count('class="off-scale series-0"') == 1
    assert "∞: non-private" in svg and not re.search(r"\b(nan|inf)\b", svg.lower())


def test_only_infinite_values_is_not_an_empty_chart() -> None:
    svg = render_svg(_chart(series=[Series("PRV", [(1, math.inf), (2, math.inf)])]))
    assert 'class="empty"' not in svg
    assert svg.count("off-scale-marker") == 2


def test_step_shapes_draw_staircases() -> None:
    pts = [(0, 0.0), (1, 1.0), (2, 3.0)]
    before = render_svg(_chart(series=[Series("s", pts, shape="step-before")]))
    after = render_svg(_chart(series=[Series("s", pts, shape="step-after")]))
    linear = render_svg(_chart(series=[Series("s", pts)]))
    path = re.compile(r'<path d="([^"]+)" fill="none"')
    assert re.fullmatch(r"M\S+ \S+ V\S+ H\S+ V\S+ H\S+", path.findall(before)[0])
    assert re.fullmatch(r"M\S+ \S+ H\S+ V\S+ H\S+ V\S+", path.findall(after)[0])
    assert re.fullmatch(r"M\S+ \S+ L\S+ \S+ L\S+ \S+", path.findall(linear)[0])


def test_two_charts_on_one_page_have_distinct_ids() -> None:
    first = render_svg(_chart(chart_id="a"))
    second = render_svg(_chart(chart_id="b"))
    ids = re.findall(r'id="([^"]+)"', first + second)
    assert len(ids) == len(set(ids))


def test_references_closer_than_a_few_pixels_are_one_line_naming_both() -> None:
    close = [Reference("planned final ε 2.96", 2.97), Reference("target ε 3", 3.0)]
    far = [Reference("planned final ε 1.5", 1.5), Reference("target ε 3", 3.0)]
    one = _parse(render_svg(_chart(references=close)))
    two = _parse(render_svg(_chart(references=far)))
    lines = [e for e in one.iter(f"{SVG}line") if e.get("class") == "reference"]
    assert len(lines) == 1
    legend = next(g for g in one.iter(f"{SVG}g") if g.get("class") == "legend")
    texts = [t.text for t in legend.iter(f"{SVG}text")]
    assert "planned final ε 2.96 and target ε 3" in texts
    assert len([e for e in two.iter(f"{SVG}line") if e.get("class") == "reference"]) == 2


def test_chart_text_is_14_px() -> None:
    root = _parse(render_svg(_chart()))
    assert root.get("font-size") == "14"
    sized = [e for e in root.iter() if e.get("font-size") is not None]
    assert all(float(e.get("font-size") or 0) >= 14 for e in sized)
