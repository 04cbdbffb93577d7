"""``count``: records per cell; a record is in one cell, so the sensitivity is 1."""

import numpy as np

from app.statistics import aggregate
from app.statistics.queries.base import Statistic
from app.statistics.shapes import Column, QueryPlan, Vector


class Count(Statistic):
    kind, order = "count", 10
    estimator = "noisy count per cell"

    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        return (Vector("count", "counts", cells, 1.0, share),)

    def exact(self, plan: QueryPlan, cells: aggregate.CellIndex, outcome: str
              ) -> list[np.ndarray]:
        index, member = cells.of(plan.groups)
        return [aggregate.bincount(index, member, plan.group_cells)]


COUNT = Count()
