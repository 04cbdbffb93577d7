"""``monitoring``: a monitoring run's one DP release on a follow-up and what is post-processed
from it (``worker.monitoring.task``); its payload is what its submission stored
(``app.monitoring.schemas.MonitoringPayload``)."""

from typing import Any

from app.jobs.kinds.monitoring import MONITORING
from app.jobs.models import Job
from app.monitoring.schemas import MonitoringPayload
from worker.handlers import ClaimedJob, task_handler
from worker.monitoring.task import run, run_release_job


def parse_monitoring(job: Job) -> MonitoringPayload:
    """A monitoring job's payload, as its submission stored it."""
    return MonitoringPayload.model_validate(job.payload)


@task_handler(MONITORING, parse=parse_monitoring)
def run_monitoring_job(worker: Any, claimed: ClaimedJob[MonitoringPayload]) -> str:
    """A claimed monitoring run to its end."""
    return run_release_job(worker, claimed, run)
