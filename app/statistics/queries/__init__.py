"""The query kinds of statistics releases, by the name a request gives.

Each is a ``base.Statistic`` (what it names, its noisy vectors and their sensitivities from
the declared bounds, their exact values, its estimator) in a module of its own; this registry
is the one place that lists them. A new kind: one module, one line here, and its name in
``app.statistics.schemas.QueryKind``.
"""

from typing import Any

import numpy as np

from app.statistics import estimate
from app.statistics.aggregate import CellIndex
from app.statistics.noise import Noise
from app.statistics.queries.base import Statistic
from app.statistics.queries.count import COUNT
from app.statistics.queries.histogram import HISTOGRAM
from app.statistics.queries.mean import MEAN
from app.statistics.queries.prevalence import PREVALENCE
from app.statistics.queries.sum import SUM
from app.statistics.schemas import QueryKind
from app.statistics.shapes import QueryPlan

STATISTICS: dict[QueryKind, Statistic] = {
    s.kind: s for s in (COUNT, SUM, MEAN, HISTOGRAM, PREVALENCE)}


def of(kind: str) -> Statistic:
    """The registered query kind named ``kind`` (a query's ``kind``)."""
    return STATISTICS[QueryKind(kind)]


def exact(plan: QueryPlan, cells: CellIndex, outcome: str) -> list[np.ndarray]:
    """The exact value of each of ``plan``'s vectors, as its kind computes them (``outcome``:
    the outcome column)."""
    return of(plan.query.kind).exact(plan, cells, outcome)


def answer(plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]) -> dict[str, Any]:
    """One query's answer as stored and served, by its kind's estimator."""
    statistic = of(plan.query.kind)
    return estimate.answer(plan, noises, statistic.cells(plan, noises, noisy),
                           statistic.estimator)
