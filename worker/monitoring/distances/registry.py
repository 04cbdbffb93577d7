"""Drift distances by name: each one a module that registers itself here.

Why a registry: a monitoring run reports, per feature, every registered distance between the
reference's and the follow-up's noisy histograms with the same noise-debiased estimator and
interval (``worker.monitoring.distances.estimate``), so a new distance is one module with one
function of two non-negative histograms, and no change to the estimator, the run or the verdict.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DistanceOf = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""(reference counts, follow-up counts, bin centres) -> the distance over the leading axes;
counts non-negative, shape (..., n_bins), on the same public bins."""


@dataclass(frozen=True)
class Distance:
    """A registered drift distance: its name (the field a run reports it under, with
    ``<name>_ci``), its function, the drift threshold its verdict uses (None: shown only), and
    the most that noise alone may make of two identical cohorts before the release cannot
    support the figure (None: always shown): past it the estimate's bias is not under control
    and the distance is withheld with that reason. A distance in the feature's units (``in_units``)
    states its ceiling as a share of the public span of the bins' centres, so that it holds
    for every feature's scale."""

    name: str
    of: DistanceOf
    threshold: float | None
    noise_ceiling: float | None = None
    in_units: bool = False

    def ceiling(self, centres: np.ndarray) -> float | None:
        """The noise ceiling on these bins, in the distance's own units (None: none)."""
        if self.noise_ceiling is None or not self.in_units:
            return self.noise_ceiling
        return self.noise_ceiling * float(centres[-1] - centres[0])


DISTANCES: dict[str, Distance] = {}
"""Registered distances by name, in registration order (the order a run reports them)."""


def register(distance: Distance) -> Distance:
    """Add a distance under its name (once: a second one of the same name is a mistake)."""
    if distance.name in DISTANCES:
        raise ValueError(f"a drift distance named {distance.name!r} is already registered")
    DISTANCES[distance.name] = distance
    return distance
