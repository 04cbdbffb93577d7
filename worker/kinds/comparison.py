"""``comparison``: champion against challenger in one DP release on a follow-up's evaluation
part (``worker.monitoring.comparison``); its payload is what its submission stored
(``app.monitoring.comparison_schemas.ComparisonPayload``)."""

from typing import Any

from app.jobs.kinds.comparison import COMPARISON
from app.jobs.models import Job
from app.monitoring.comparison_schemas import ComparisonPayload
from worker.handlers import ClaimedJob, task_handler
from worker.monitoring.comparison import run
from worker.monitoring.task import run_release_job


def parse_comparison(job: Job) -> ComparisonPayload:
    """A comparison job's payload, as its submission stored it."""
    return ComparisonPayload.model_validate(job.payload)


@task_handler(COMPARISON, parse=parse_comparison)
def run_comparison_job(worker: Any, claimed: ClaimedJob[ComparisonPayload]) -> str:
    """A claimed comparison to its end."""
    return run_release_job(worker, claimed, run)
