"""Each registered query kind's sensitivities hold: removing any one record from a cohort moves
each of its exact vectors by at most the sensitivity its plan declares (in L1, hence in L2),
checked on the exact aggregates themselves rather than on the kind's own arithmetic."""

import numpy as np
import pyarrow as pa
import pytest

from app.datasets.schema.dataset_schema import FeatureKind
from app.statistics import queries
from app.statistics.aggregate import CellIndex
from app.statistics.cohort import Cohort
from app.statistics.schemas import StatisticQuery
from app.statistics.shapes import Axis, Column, QueryPlan

X = Column("x", FeatureKind.NUMERIC, -3.0, 5.0)
GROUP = Axis(Column("g", FeatureKind.CATEGORICAL, 0.0, 2.0, ("a", "b", "c")), None,
             ("a", "b", "c"))
BINS = Axis(X, (-3.0, 0.0, 2.0, 5.0), ("[-3, 0)", "[0, 2)", "[2, 5]"))


def _cohort(rows: int, seed: int) -> Cohort:
    rng = np.random.default_rng(seed)
    columns = {"x": rng.uniform(-6.0, 8.0, rows),  # beyond the bounds: clipped
               "g": rng.integers(0, 3, rows).astype(float),
               "y": rng.integers(0, 2, rows).astype(float)}
    return Cohort(columns, rows, pa.array(np.arange(rows)))


def _plan(kind: str) -> QueryPlan:
    statistic = queries.of(kind)
    column = X if statistic.reads_column else None
    bins = BINS if statistic.takes_bins else None
    cells = GROUP.size * (bins.size if bins else 1)
    query = StatisticQuery.model_validate({"kind": str(kind)})
    return QueryPlan(0, query, column, (GROUP,), bins, statistic.vectors(column, cells, 1.0),
                     1.0)


def test_every_query_kind_is_registered() -> None:
    assert queries.names() == ("count", "sum", "mean", "histogram", "prevalence")  # API order
    assert all(s.kind == k for k, s in queries.STATISTICS.items())


@pytest.mark.parametrize("kind", list(queries.STATISTICS))
def test_removing_one_record_moves_each_vector_by_at_most_its_sensitivity(
        kind: str) -> None:
    plan, cohort = _plan(kind), _cohort(200, seed=7)
    full = queries.exact(plan, CellIndex(cohort), "y")
    assert [len(v) for v in full] == [v.cells for v in plan.vectors]
    for removed in range(cohort.rows):
        keep = np.arange(cohort.rows) != removed
        neighbour = Cohort({k: v[keep] for k, v in cohort.columns.items()}, cohort.rows - 1,
                           cohort.ids.filter(pa.array(keep)))
        for vector, a, b in zip(plan.vectors, full,
                                queries.exact(plan, CellIndex(neighbour), "y"), strict=True):
            assert np.abs(a - b).sum() <= vector.sensitivity * (1 + 1e-12), (kind, removed)
