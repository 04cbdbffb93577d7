"""``monitoring``: a monitoring run of a model on a follow-up cohort (``app.monitoring``); its
results are served by ``/v1/monitoring-runs/{id}``, not by the job view."""

from app.jobs.kinds.base import JobKind
from app.jobs.results import MonitoringResults

MONITORING = JobKind("monitoring", order=2, results=MonitoringResults, served=False)
