"""Exact aggregates of a cohort, one array per planned vector: what the noise is added to.

Cells are laid out row-major over the query's grouping axes (then the histogram's bins), in
the order the plan lists them; each query kind's ``exact`` (``app.statistics.queries``) reads
them with the helpers here. A record whose value lies outside a grouping's or histogram's
bins is in no cell (it adds nothing). Values are clipped to the declared bounds before they
are summed, which is what the sensitivities assume; sums are exact (``exact_sums``: no float
rounding can stretch a sensitivity). Each grouping's cell index is computed once
per release and shared by the queries that group the same way.
"""

import math

import numpy as np

from app.datasets.schema.dataset_schema import FeatureKind
from app.statistics.cohort import Cohort
from app.statistics.shapes import Axis, QueryPlan

Cells = tuple[np.ndarray, np.ndarray | None]  # cell index per record, and who is in a cell
MAX_LOOKUP = 1_000_000  # an integer column's span up to which bins are found by lookup


def _bin_codes(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's bin, -1 below the first edge and len(edges) - 1 above the last (closed)."""
    codes = np.searchsorted(edges, values, side="right") - 1
    codes[values == edges[-1]] = len(edges) - 2  # the last bin is closed
    return codes


def axis_codes(axis: Axis, values: np.ndarray) -> Cells:
    """Each record's code on ``axis``, and who is inside its bins (None: everyone)."""
    if axis.edges is None:  # categories (binary 0/1, category codes)
        codes = values.astype(np.int64)
        inside = (codes >= 0) & (codes < axis.size)
        return codes, None if inside.all() else inside
    edges = np.asarray(axis.edges)
    low, high = axis.column.lower, axis.column.upper
    if axis.column.kind is FeatureKind.INTEGER and high - low <= MAX_LOOKUP:
        # Whole numbers within public bounds: one table lookup per record (no search).
        lookup = _bin_codes(edges, np.arange(low, high + 1))
        codes = lookup[(np.clip(values, low, high) - low).astype(np.int64)]
    else:
        codes = _bin_codes(edges, np.clip(values, low, high))
    inside = (codes >= 0) & (codes < axis.size)
    return codes, None if inside.all() else inside


def _combine(axes: tuple[Axis, ...], cohort: Cohort) -> Cells:
    index = np.zeros(cohort.rows, dtype=np.int64)
    member: np.ndarray | None = None
    for axis in axes:
        codes, inside = axis_codes(axis, cohort.columns[axis.column.name])
        index = index * axis.size + np.where(codes < 0, 0, codes)
        if inside is not None:
            member = inside if member is None else member & inside
    return index, member


class CellIndex:
    """Cell indices per grouping, computed once per release."""

    def __init__(self, cohort: Cohort) -> None:
        self.cohort = cohort
        self._known: dict[tuple[object, ...], Cells] = {}

    def of(self, axes: tuple[Axis, ...]) -> Cells:
        key = tuple((a.column.name, a.edges) for a in axes)
        if key not in self._known:
            self._known[key] = _combine(axes, self.cohort)
        return self._known[key]


def bincount(index: np.ndarray, member: np.ndarray | None, size: int,
              weights: np.ndarray | None = None) -> np.ndarray:
    if member is not None:
        index = index[member]
        weights = None if weights is None else weights[member]
    return np.bincount(index, weights=weights, minlength=size).astype(np.float64)


def clipped(plan: QueryPlan, cohort: Cohort) -> np.ndarray:
    assert plan.column is not None
    return np.clip(cohort.columns[plan.column.name], plan.column.lower, plan.column.upper)


def grid_exponent(rows: int, bound: float) -> int:
    """The public grid 2^-k on which sums are exact: the largest k (at most 40, about 1e-12)
    with rows * bound * 2^k <= 2^53, so every partial sum of grid values is an integer below
    2^53 and converts to float64 without rounding."""
    span = max(rows, 1) * max(bound, 1e-300)
    return int(min(40, math.floor(53 - math.log2(span))))


def exact_sums(index: np.ndarray, member: np.ndarray | None, size: int, values: np.ndarray,
               lower: float, upper: float) -> np.ndarray:
    """Per-cell sums of ``values`` (already within [lower, upper]) with no rounding error.

    A float64 sum rounds at every addition, so a neighbouring cohort's sum can move by more
    than the nominal sensitivity (Casacuberta et al., "Widespread Underestimation of
    Sensitivity in Differentially Private Libraries", CCS 2022). Instead each value is rounded
    once to the public grid 2^-k (``grid_exponent``), kept within [lower, upper], and the
    grid units are summed in integers: the result is the exact sum of values that each lie in
    the declared bounds, so the sensitivity stated in ``plan`` holds exactly.
    """
    if member is not None:
        index, values = index[member], values[member]
    scale = 2.0 ** grid_exponent(len(values), max(abs(lower), abs(upper)))
    units = np.clip(np.rint(values * scale), math.ceil(lower * scale),
                    math.floor(upper * scale)).astype(np.int64)
    sums = np.zeros(size, dtype=np.int64)
    np.add.at(sums, index, units)
    return sums.astype(np.float64) / scale
