"""The ``federated`` kind's handler: a clinic's part in a federation (``worker.federated_site``)."""

from app.federation.plan import FEDERATION_KEY
from app.jobs.models import FEDERATED, Job
from worker.federated_site import run_federated
from worker.handlers import ClaimedJob, task_handler
from worker.tasks import spec_of


def claimed_federated(job: Job) -> ClaimedJob:
    """A site's part: its local DP-SGD spec and the federation's part of its stored plan."""
    return ClaimedJob(job.id, job.dataset_id, spec_of(job), job.kind,
                      federation=job.training.get(FEDERATION_KEY))


task_handler(FEDERATED, parse=claimed_federated)(run_federated)
