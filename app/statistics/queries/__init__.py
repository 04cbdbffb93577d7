"""The query kinds of statistics releases, by the name a request gives.

Each is a ``base.Statistic`` (what it names, its noisy vectors and their sensitivities from
the declared bounds, their exact values, its estimator) in a module of its own, with one
instance of it; the package finds every module here (``app.core.plugins.members``), in each
class's ``order``, so a new kind is its module alone: the registry lists it and a request may
name it (``app.statistics.schemas.QueryKind``).
"""

import sys
from typing import Any

import numpy as np

from app.core import plugins
from app.statistics import estimate
from app.statistics.aggregate import CellIndex
from app.statistics.noise import Noise
from app.statistics.queries.base import Statistic
from app.statistics.schemas import QUERY_KINDS
from app.statistics.shapes import QueryPlan

STATISTICS: dict[str, Statistic] = {
    s.kind: s for s in plugins.members(sys.modules[__name__], Statistic)}  # type: ignore[type-abstract]


def names() -> tuple[str, ...]:
    """The kinds a request may name, in the order the API lists them."""
    return tuple(STATISTICS)


QUERY_KINDS.provide(names)


def of(kind: str) -> Statistic:
    """The registered query kind named ``kind`` (a query's ``kind``)."""
    return STATISTICS[kind]


def exact(plan: QueryPlan, cells: CellIndex, outcome: str) -> list[np.ndarray]:
    """The exact value of each of ``plan``'s vectors, as its kind computes them (``outcome``:
    the outcome column)."""
    return of(plan.query.kind).exact(plan, cells, outcome)


def answer(plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]) -> dict[str, Any]:
    """One query's answer as stored and served, by its kind's estimator."""
    statistic = of(plan.query.kind)
    return estimate.answer(plan, noises, statistic.cells(plan, noises, noisy),
                           statistic.estimator)
