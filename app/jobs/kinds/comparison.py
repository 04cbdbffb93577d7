"""``comparison``: champion against challenger on a follow-up cohort
(``app.monitoring.comparison``); its results are served by ``/v1/comparisons/{id}``, not by
the job view."""

from app.jobs.kinds.base import JobKind
from app.jobs.results import ComparisonResults

COMPARISON = JobKind("comparison", order=3, results=ComparisonResults, served=False)
