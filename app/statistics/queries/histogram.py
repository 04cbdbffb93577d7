"""``histogram``: records per cell and bin of a column (its public bins or its categories);
a record is in one cell, so the sensitivity is 1. The bins are the cells' last axis."""

import numpy as np

from app.statistics import aggregate
from app.statistics.queries.base import Statistic
from app.statistics.shapes import Column, QueryPlan, Vector


class Histogram(Statistic):
    kind, order = "histogram", 40
    estimator = "noisy count per cell and bin"
    reads_column = takes_bins = True

    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        return (Vector("histogram", "counts", cells, 1.0, share),)

    def exact(self, plan: QueryPlan, cells: aggregate.CellIndex, outcome: str
              ) -> list[np.ndarray]:
        assert plan.bins is not None
        index, member = cells.of(plan.groups)
        codes, inside = aggregate.axis_codes(plan.bins,
                                             cells.cohort.columns[plan.bins.column.name])
        both = member if inside is None else inside if member is None else member & inside
        return [aggregate.bincount(index * plan.bins.size + np.where(codes < 0, 0, codes), both,
                                   plan.cells)]


HISTOGRAM = Histogram()
