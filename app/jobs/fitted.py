"""Planning a job of a family that is not trained by DP-SGD: its one release, from public
quantities, as the family plans it (``Family.plan_release``).

The job keeps the planned event and the family's settings in its stored training request
(``RELEASE_KEY``); its DP-SGD columns stay null (``Job.dp_sgd`` is False). The ledger reserves
that event whole (``app.flows.training``) and charges it whole: the trainer spends it at once.
"""

import math

from dp_accounting import DpEvent

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema
from app.families import Family, create_family, family_names
from app.families.base import PlanRefused, ReleaseRequest
from app.jobs import size_floor
from app.jobs.models import QUEUED, Job, NotDpSgd
from app.jobs.schemas import JobCreate
from app.privacy import accounting, events

RELEASE_KEY = "release"
"""Where a job of a family that is not DP-SGD keeps its planned event and settings in its
stored training request (``ReleasePlan``): what its trainer reads and the ledger reserved."""


def plan(*, dataset: Dataset, request: JobCreate, family: Family, delta: float,
                  inputs: int) -> Job:
    """The job of a family fitted by one release (``Family.plan_release``): its event from
    public quantities, no DP-SGD plan (those columns stay null).

    Raises:
        InvalidRequest: a search (its grid is DP-SGD's), a noise of 0, or what the family
            refuses (``PlanRefused``, naming its field).
        DatasetTooSmall: the training part below its floor at the planned epsilon.
    """
    if request.search is not None:
        raise InvalidRequest(
            f"model {family.name!r} is not trained by DP-SGD: the accounted search varies "
            "DP-SGD runs only", field="training.model", allowed=_dp_sgd_names())
    if request.privacy.noise_multiplier == 0.0:
        raise InvalidRequest(
            f"model {family.name!r} is fitted by one DP release: it takes a positive noise "
            "or a target epsilon", field="privacy.noise_multiplier")
    try:
        planned = family.plan_release(ReleaseRequest(
            target_epsilon=request.privacy.target_epsilon,
            noise_multiplier=request.privacy.noise_multiplier, delta=delta,
            n_train=dataset.n_train, n_calibration=dataset.n_calibration,
            n_evaluation=dataset.n_evaluation, n_inputs=inputs, schema=_schema_of(dataset),
            training=request.training.model_dump()))
    except PlanRefused as refused:
        raise InvalidRequest(str(refused), field=refused.field,
                             allowed=refused.allowed) from refused
    stored = request.training.model_dump()
    stored[RELEASE_KEY] = {"event": events.to_json(planned.event), **planned.settings}
    job = Job(dataset_id=dataset.id, status=QUEUED, target_epsilon=request.privacy.target_epsilon,
              requested_noise_multiplier=request.privacy.noise_multiplier,
              noise_multiplier=planned.noise_multiplier, delta=delta, training=stored,
              progress_epoch=0, epsilon_per_epoch=[], cancel_requested=False)
    if request.privacy.target_epsilon is None:  # a noise multiplier: its planned epsilon
        epsilon = accounting.epsilon_by_accountant([planned.event], delta)["prv"]
        size_floor.check_training(dataset=dataset, epsilon=math.inf if epsilon is None
                                  else epsilon, delta=delta, inputs=inputs,
                                  field=size_floor.NOISE_FIELD)
    return job


def _schema_of(dataset: Dataset) -> DatasetSchema:
    return (BUILT_IN_SCHEMA if dataset.schema_json is None
            else DatasetSchema.model_validate(dataset.schema_json))


def _dp_sgd_names() -> str:
    """The registered families trained by DP-SGD, for a refusal's ``allowed``."""
    return ", ".join(name for name in family_names() if create_family(name).dp_sgd)


def planned_release(job: Job) -> DpEvent:
    """A fitted family's job's planned event, as stored when it was planned.

    Raises:
        NotDpSgd: the job is DP-SGD, or holds no planned release.
    """
    stored = job.training_request.get(RELEASE_KEY)
    if job.dp_sgd or not isinstance(stored, dict) or "event" not in stored:
        raise NotDpSgd(f"job {job.id} has no planned release of a fitted family")
    return events.from_json(stored["event"])
