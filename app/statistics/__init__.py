"""DP statistics releases.

The package loads its two registries (``mechanisms``, ``queries``) with itself: each hands the
request schemas its names (``schemas.NOISE_MECHANISMS``, ``schemas.QUERY_KINDS``), so a request
body validates wherever ``app.statistics.schemas`` is imported from.
"""

from app.statistics import mechanisms, queries

__all__ = ["mechanisms", "queries"]
