"""``federated``: this clinic's part in a federation (``worker.federated_site``), its payload
the site's local DP-SGD spec and its federation part (``FederatedPayload``).

``worker.federated_task`` registers the same handler as it is imported (a second registration
of the same task is allowed), so this module names the kind in the registry's package while
the federation's own modules keep its task.
"""

from app.jobs.kinds.federated import FEDERATED
from worker.federated_site import run_federated
from worker.federated_task import parse_federated
from worker.handlers import task_handler

task_handler(FEDERATED, parse=parse_federated)(run_federated)
