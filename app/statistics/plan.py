"""Plan a release from the request and the declared schema alone: no row is read here.

Every query is resolved against the dataset's declared columns (model features, subgroup
attributes and the outcome, which reads as a binary column: 1 is the event). Group keys and
bins come from the schema and the request, never from the data, so an empty group is answered
like any other. Each query becomes one or two noisy *vectors* with a sensitivity under adding
or removing one record, computed from the declared bounds by the query's kind
(``app.statistics.queries``, one module each):

* ``count``, ``histogram``: counts per cell (a record is in one cell): sensitivity 1.
* ``sum``: sums of values clipped to [lower, upper]: sensitivity max(|lower|, |upper|).
* ``mean``: counts (sensitivity 1) and sums of (value - midpoint), values clipped to the bounds
  (sensitivity (upper - lower) / 2); the mean is midpoint + noisy sum / noisy count, clipped to
  the bounds. Half of the query's share goes to each: the split that minimises the worst-case
  error (a mean at a bound).
* ``prevalence``: counts of outcome events and of non-events per cell (one record changes one
  of them by 1: sensitivity 1); the prevalence is events / (events + non-events).

Bad input is a 422 naming the field (``queries[2].by[0].bins``) with what is allowed.
"""

import math

from app.core.errors import InvalidRequest
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind
from app.statistics import mechanisms, queries
from app.statistics.queries.base import Statistic
from app.statistics.schemas import MAX_CELLS, BinnedColumn, StatisticQuery, StatisticsCreate
from app.statistics.shapes import BINARY_LABELS, Axis, Column, QueryPlan


def _fail(field: str, detail: str, allowed: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {detail}", field=field, allowed=allowed)


def columns_of(schema: DatasetSchema) -> dict[str, Column]:
    """Every column a query may name: features, attributes, and the outcome (binary)."""
    found: dict[str, Column] = {}
    for f in schema.features:
        lower, upper = f.bounds
        labels = tuple(f.categories or ()) if f.kind is FeatureKind.CATEGORICAL else (
            BINARY_LABELS if f.kind is FeatureKind.BINARY else ())
        found[f.name] = Column(f.name, f.kind, lower, upper, labels)
    for a in schema.attributes:
        found[a.name] = Column(a.name, FeatureKind.CATEGORICAL, 0.0,
                               float(len(a.categories) - 1), tuple(a.categories))
    found[schema.outcome.name] = Column(schema.outcome.name, FeatureKind.BINARY, 0.0, 1.0,
                                        BINARY_LABELS)
    return found


def _column(columns: dict[str, Column], name: str, field: str) -> Column:
    if name not in columns:
        raise _fail(field, f"unknown column {name!r}", f"one of {sorted(columns)}")
    return columns[name]


def _label(column: Column, low: float, high: float, last: bool) -> str:
    whole = column.kind is FeatureKind.INTEGER and low.is_integer() and high.is_integer()
    if whole:
        top = int(min(high, column.upper)) if last else int(high) - 1
        return f"{int(low)}" if top == int(low) else f"{int(low)}-{top}"
    return f"[{low:g}, {high:g}{']' if last else ')'}"


def _edges(column: Column, edges: list[float], field: str) -> Axis:
    """Public bin edges: strictly increasing, within the declared bounds."""
    if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise _fail(field, "bin edges must increase strictly", "strictly increasing edges")
    if edges[0] < column.lower or edges[-1] > column.top_edge:
        raise _fail(field, f"bin edges must lie within {column.name!r}'s declared bounds",
                    f"edges in [{column.lower:g}, {column.top_edge:g}]")
    labels = tuple(_label(column, float(a), float(b), i == len(edges) - 2)
                   for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False)))
    return Axis(column, tuple(float(e) for e in edges), labels)


def _group(columns: dict[str, Column], item: str | BinnedColumn, field: str) -> Axis:
    if isinstance(item, str):
        column = _column(columns, item, field)
        if column.numeric:
            raise _fail(field, f"{item!r} is numeric: group by it with public bins",
                        f'{{"feature": "{item}", "bins": [edges]}}')
        return Axis(column, None, column.labels)
    column = _column(columns, item.feature, f"{field}.feature")
    if not column.numeric:
        raise _fail(f"{field}.bins", f"{item.feature!r} is {column.kind}: its categories are "
                    "its groups", "absent (name the column alone)")
    return _edges(column, item.bins, f"{field}.bins")


def _groups(columns: dict[str, Column], query: StatisticQuery, at: str) -> tuple[Axis, ...]:
    axes: list[Axis] = []
    for j, item in enumerate(query.by):
        axis = _group(columns, item, f"{at}.by[{j}]")
        if axis.column.name in {a.column.name for a in axes}:
            raise _fail(f"{at}.by[{j}]", f"{axis.column.name!r} is grouped by twice",
                        "each column once")
        axes.append(axis)
    return tuple(axes)


def _target(columns: dict[str, Column], query: StatisticQuery, statistic: Statistic, at: str
            ) -> Column | None:
    """The query's column: required by a kind that reads one (sum, mean, histogram), absent
    otherwise; only a kind with bins reads a categorical column."""
    if not statistic.reads_column:
        if query.feature is not None or query.bins is not None:
            what = "feature" if query.feature is not None else "bins"
            raise _fail(f"{at}.{what}", f"a {query.kind} query takes no {what}", "absent")
        return None
    if query.feature is None:
        raise _fail(f"{at}.feature", f"a {query.kind} query needs a column", "a column name")
    column = _column(columns, query.feature, f"{at}.feature")
    if not statistic.takes_bins:
        if query.bins is not None:
            raise _fail(f"{at}.bins", f"a {query.kind} query takes no bins", "absent")
        if column.kind is FeatureKind.CATEGORICAL:
            raise _fail(f"{at}.feature", f"{column.name!r} is categorical: it has no {query.kind}"
                        "; ask for its histogram", "a numeric, integer or binary column")
    return column


def _histogram_bins(column: Column, query: StatisticQuery, at: str) -> Axis:
    if not column.numeric:
        if query.bins is not None:
            raise _fail(f"{at}.bins", f"{column.name!r} is {column.kind}: its categories are "
                        "the bins", "absent")
        return Axis(column, None, column.labels)
    if query.bins is None:
        raise _fail(f"{at}.bins", f"{column.name!r} is numeric: its histogram needs public bins",
                    f"increasing edges in [{column.lower:g}, {column.top_edge:g}]")
    return _edges(column, query.bins, f"{at}.bins")


def _query(columns: dict[str, Column], query: StatisticQuery, index: int, share: float
           ) -> QueryPlan:
    at = f"queries[{index}]"
    statistic = queries.of(query.kind)
    column = _target(columns, query, statistic, at)
    groups = _groups(columns, query, at)
    bins = None
    if statistic.takes_bins:
        assert column is not None
        bins = _histogram_bins(column, query, at)
    cells = math.prod(a.size for a in groups) * (bins.size if bins else 1)
    if cells > MAX_CELLS:
        raise _fail(f"{at}.by", f"this query has {cells} cells", f"at most {MAX_CELLS} cells")
    return QueryPlan(index, query, column, groups, bins,
                     statistic.vectors(column, cells, share), share)


def plan(*, schema: DatasetSchema, request: StatisticsCreate) -> list[QueryPlan]:
    """Resolve every query against ``schema`` and split the privacy target by weight.

    Raises:
        InvalidRequest: an unknown column, a numeric grouping without bins, bins that do not
            increase or leave the declared bounds, a field a query kind does not take, more
            than MAX_CELLS cells, or a delta with Laplace noise.
    """
    if not mechanisms.of(request.privacy.mechanism).takes_delta and (
            request.privacy.delta is not None):
        takes = sorted(str(m) for m, found in mechanisms.MECHANISMS.items() if found.takes_delta)
        raise _fail("privacy.delta", f"the {request.privacy.mechanism} mechanism is pure "
                    "epsilon-DP: it takes no delta", f"absent, or mechanism one of {takes}")
    columns = columns_of(schema)
    total = math.fsum(q.weight for q in request.queries)
    plans = [_query(columns, q, i, q.weight / total) for i, q in enumerate(request.queries)]
    cells = sum(p.cells for p in plans)
    if cells > MAX_CELLS:
        raise _fail("queries", f"the release has {cells} cells in all",
                    f"at most {MAX_CELLS} cells")
    return plans
