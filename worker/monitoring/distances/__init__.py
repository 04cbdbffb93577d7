"""Drift distances between two noisy feature histograms, registered by name.

Importing the package registers the built-in distances (``psi``, ``wasserstein``); a new one is
a module here that calls ``registry.register`` and is imported below (docs/layout.md, "Adding
a drift distance").
"""

from worker.monitoring.distances import psi, wasserstein
from worker.monitoring.distances.registry import DISTANCES, Distance, register

__all__ = ["DISTANCES", "Distance", "psi", "register", "wasserstein"]
