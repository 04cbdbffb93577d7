"""What a statistics query kind is: one object from its public plan to its answer's cells.

A ``Statistic`` carries, for one kind of query (its ``kind``, the word a request names):

* what the query names (``reads_column``: a column; ``takes_bins``: public bins of it);
* its public plan: the noisy vectors it releases, each with its sensitivity under adding or
  removing one record, from the declared bounds alone (``vectors``), and its privacy share;
* the exact values of those vectors on a cohort (``exact``), which the noise is added to;
* its estimator: the answer's cells from the noisy vectors (``cells``), post-processing only.

The noise itself is the release's mechanism's (``app.statistics.mechanisms``). A new kind is
one module in ``app.statistics.queries`` with one subclass and one instance of it: the package
finds it, and a request may name it (``app.statistics.schemas.QueryKind``).
"""

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from app.statistics import estimate
from app.statistics.aggregate import CellIndex
from app.statistics.noise import Noise
from app.statistics.shapes import Column, QueryPlan, Vector


class Statistic(ABC):
    """One query kind's rules (see the module docstring)."""

    kind: ClassVar[str]  # the word a request names it by
    order: ClassVar[int] = 0  # where the API lists it (OpenAPI's enum, errors); ties by kind
    estimator: ClassVar[str]  # the estimator in words, shown with every answer
    reads_column: ClassVar[bool] = False  # the query names a column (``feature``)
    takes_bins: ClassVar[bool] = False  # its column's cells are public bins or categories

    @abstractmethod
    def vectors(self, column: Column | None, cells: int, share: float) -> tuple[Vector, ...]:
        """The noisy vectors of a query with ``cells`` cells and ``share`` of the target."""

    @abstractmethod
    def exact(self, plan: QueryPlan, cells: CellIndex, outcome: str) -> list[np.ndarray]:
        """The exact value of each of ``plan``'s vectors (``outcome``: the outcome column)."""

    def cells(self, plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]
              ) -> list[dict[str, Any]]:
        """The answer's cells, in the plan's row-major order (default: the noisy values)."""
        return estimate.direct(plan, noises[0], noisy[0])
