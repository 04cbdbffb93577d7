"""``federated``: this clinic's part in a federation (``worker.federated_site``), its payload
the site's local DP-SGD spec and its federation part (``FederatedPayload``)."""

from app.federation.schemas import FederationPart
from app.jobs.kinds.federated import FEDERATED
from app.jobs.models import Job
from worker.federated_site import FederatedPayload, run_federated
from worker.handlers import task_handler
from worker.tasks import spec_of


def parse_federated(job: Job) -> FederatedPayload:
    """A site's part: its local DP-SGD spec and its stored federation part."""
    return FederatedPayload(spec=spec_of(job), part=FederationPart.model_validate(job.payload))


task_handler(FEDERATED, parse=parse_federated)(run_federated)
