"""What a planned release is made of: columns, axes of cells, noisy vectors, query plans.

Plain data, fixed from the request and the declared schema alone (``app.statistics.plan``);
the aggregates, the noise and the estimators read them, and the query's kind
(``app.statistics.queries``) says how its vectors are computed and answered.
"""

import math
from dataclasses import dataclass

from app.datasets.schema.dataset_schema import FeatureKind
from app.statistics.schemas import StatisticQuery

NUMERIC_KINDS = (FeatureKind.NUMERIC, FeatureKind.INTEGER)
BINARY_LABELS = ("0", "1")


@dataclass(frozen=True)
class Column:
    """A declared column as statistics read it: kind, public bounds, and category labels."""

    name: str
    kind: FeatureKind
    lower: float
    upper: float
    labels: tuple[str, ...] = ()  # binary and categorical columns: their values' labels

    @property
    def numeric(self) -> bool:
        return self.kind in NUMERIC_KINDS

    @property
    def top_edge(self) -> float:
        """The highest bin edge allowed: an integer column's bins may end at upper + 1."""
        return self.upper + 1 if self.kind is FeatureKind.INTEGER else self.upper


@dataclass(frozen=True)
class Axis:
    """One dimension of a query's cells: a grouping column, or a histogram's bins."""

    column: Column
    edges: tuple[float, ...] | None  # numeric bins; None: the column's categories
    labels: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Vector:
    """One noisy vector: what it holds, its cells, its sensitivity and its privacy share."""

    role: str  # count | sum | shifted_sum | histogram | outcome
    of: str
    cells: int
    sensitivity: float
    share: float  # fraction of the release's privacy (rho for Gaussian, epsilon for Laplace)


@dataclass(frozen=True)
class QueryPlan:
    index: int
    query: StatisticQuery
    column: Column | None
    groups: tuple[Axis, ...]
    bins: Axis | None
    vectors: tuple[Vector, ...]
    share: float

    @property
    def group_cells(self) -> int:
        return math.prod(axis.size for axis in self.groups)

    @property
    def cells(self) -> int:
        return self.group_cells * (self.bins.size if self.bins else 1)
