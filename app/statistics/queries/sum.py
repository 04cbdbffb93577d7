"""``sum``: sums per cell of a column's values clipped to its declared [lower, upper]; one
record moves one sum by at most max(|lower|, |upper|), its sensitivity."""

import numpy as np

from app.statistics import aggregate
from app.statistics.queries.base import Statistic
from app.statistics.shapes import Column, QueryPlan, Vector


class Sum(Statistic):
    kind, order = "sum", 20
    estimator = "noisy sum per cell of the values clipped to the declared bounds"
    reads_column = True

    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        assert column is not None
        return (Vector("sum", f"sums of {column.name} clipped to [{column.lower:g}, "
                       f"{column.upper:g}]", cells, max(abs(column.lower), abs(column.upper)),
                       share),)

    def exact(self, plan: QueryPlan, cells: aggregate.CellIndex, outcome: str
              ) -> list[np.ndarray]:
        assert plan.column is not None
        index, member = cells.of(plan.groups)
        return [aggregate.exact_sums(index, member, plan.group_cells,
                                     aggregate.clipped(plan, cells.cohort),
                                     plan.column.lower, plan.column.upper)]


SUM = Sum()
