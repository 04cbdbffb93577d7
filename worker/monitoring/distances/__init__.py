"""Drift distances between two noisy feature histograms, registered by name.

Importing the package imports every module here once, in the order of their names, and each
distance module registers itself (``registry.register``) as it is imported: the order a run
reports them in. A new distance is its module here (docs/layout.md, "Adding a drift distance").
"""

import sys

from app.core import plugins
from worker.monitoring.distances.registry import DISTANCES, Distance, register

plugins.modules(sys.modules[__name__], skip=("estimate", "registry"))

__all__ = ["DISTANCES", "Distance", "register"]
