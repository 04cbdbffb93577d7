"""``mean``: counts (sensitivity 1) and sums of (value - midpoint), values clipped to the
declared bounds (sensitivity (upper - lower) / 2), half of the query's share each: the split
that minimises the worst-case error (a mean at a bound). The mean is midpoint + noisy sum /
noisy count, clipped to the bounds, with the delta method's standard error."""

from typing import Any

import numpy as np

from app.statistics import aggregate, estimate
from app.statistics.noise import Noise
from app.statistics.queries.base import Statistic
from app.statistics.shapes import Column, QueryPlan, Vector


class Mean(Statistic):
    kind, order = "mean", 30
    estimator = ("midpoint + noisy sum of (value - midpoint) / noisy count, clipped to the "
                 "declared bounds (values clipped first); delta-method standard error")
    reads_column = True

    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        assert column is not None
        mid, half = (column.lower + column.upper) / 2, (column.upper - column.lower) / 2
        return (Vector("count", "counts", cells, 1.0, share / 2),
                Vector("shifted_sum", f"sums of ({column.name} - {mid:g}), values clipped to "
                       f"[{column.lower:g}, {column.upper:g}]", cells, half, share / 2))

    def exact(self, plan: QueryPlan, cells: aggregate.CellIndex, outcome: str
              ) -> list[np.ndarray]:
        assert plan.column is not None
        index, member = cells.of(plan.groups)
        size, lower, upper = plan.group_cells, plan.column.lower, plan.column.upper
        mid = (lower + upper) / 2
        return [aggregate.bincount(index, member, size),
                aggregate.exact_sums(index, member, size,
                                     aggregate.clipped(plan, cells.cohort) - mid,
                                     lower - mid, upper - mid)]

    def cells(self, plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]
              ) -> list[dict[str, Any]]:
        assert plan.column is not None
        lower, upper = plan.column.lower, plan.column.upper
        mid, half = (lower + upper) / 2, (upper - lower) / 2
        counts, sums = np.maximum(noisy[0], 1.0), noisy[1]
        shifted = np.clip(sums / counts, -half, half)
        variance = (noises[1].standard_error**2
                    + shifted**2 * noises[0].standard_error**2) / counts**2
        errors = np.minimum(np.sqrt(variance), half)
        return estimate.ratio_cells(plan, mid + shifted, errors, (lower, upper))


MEAN = Mean()
