"""``prevalence``: counts of outcome events and of non-events per cell, one vector (one
record changes one of them by 1: sensitivity 1); the prevalence is events / (events +
non-events), clipped to [0, 1], with the delta method's standard error."""

from typing import Any

import numpy as np

from app.statistics import aggregate, estimate
from app.statistics.noise import Noise
from app.statistics.queries.base import Statistic
from app.statistics.shapes import Column, QueryPlan, Vector


class Prevalence(Statistic):
    kind, order = "prevalence", 50
    estimator = ("noisy events / (noisy events + noisy non-events), clipped to [0, 1]; "
                 "delta-method standard error")

    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        return (Vector("outcome", "counts of outcome events and non-events", 2 * cells, 1.0,
                       share),)

    def exact(self, plan: QueryPlan, cells: aggregate.CellIndex, outcome: str
              ) -> list[np.ndarray]:
        index, member = cells.of(plan.groups)
        size = plan.group_cells
        events = aggregate.bincount(index, member, size, cells.cohort.columns[outcome])
        return [np.concatenate([events, aggregate.bincount(index, member, size) - events])]

    def cells(self, plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]
              ) -> list[dict[str, Any]]:
        size, noise = plan.group_cells, noises[0]
        events, others = noisy[0][:size], noisy[0][size:]
        counts = np.maximum(events + others, 1.0)
        share = np.clip(events / counts, 0.0, 1.0)
        variance = noise.standard_error**2 * ((1 - share) ** 2 + share**2) / counts**2
        errors = np.minimum(np.sqrt(variance), 0.5)
        return estimate.ratio_cells(plan, share, errors, (0.0, 1.0))


PREVALENCE = Prevalence()
