"""Monitoring runs: the rules of a run (which follow-up, what it costs), its job, its views.

A run measures a registered model on a follow-up cohort with ONE DP release on that cohort
(``worker.monitoring``): the training-time evaluation's noisy histograms (score bin x outcome,
overall and per subgroup) and a noisy histogram of each feature on public bins
(``app.monitoring.bins``), all under one Gaussian mechanism. It is admitted by the follow-up's
ledger (its own filter and its patients' blocks) when it is submitted, like a job, and charged
for good when the worker has drawn its noise. Data drift needs the same histograms of the
training cohort: the first run of a model asks for them once, as a statistics release on the
training dataset at the run's target (charged there; every later run reuses it). Where that
dataset cannot pay for it (erased, or its budget spent), the run goes on without data drift
and says so. An unlabelled follow-up (features only, ``app.datasets.schema.labels``) takes a run
too: its release is the feature histograms alone, the same mechanism at the same target (only the
sensitivity, sqrt(features), and so the noise per cell, changes); nothing else evaluates it.
"""

import math
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import Conflict, InvalidRequest, NotFound
from app.datasets import service as dataset_service
from app.datasets.models import READY, Dataset
from app.datasets.schema import labels
from app.datasets.schema.dataset_schema import schema_hash
from app.datasets.schemas import DatasetCreate, UploadSource
from app.jobs import service as job_service
from app.jobs.kinds.base import JobKind
from app.jobs.models import MONITORING, QUEUED, Job
from app.jobs.schemas import TaskPayload
from app.ledger import statistics as ledger_statistics
from app.ledger.errors import BudgetExceeded
from app.monitoring.bins import FeatureBins, schema_bins
from app.monitoring.models import MonitoringRun
from app.monitoring.schemas import MonitoringPayload, MonitoringRunCreate
from app.privacy import events, mechanisms
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from app.statistics import service as statistics_service
from app.statistics.models import StatisticsRelease
from app.statistics.schemas import StatisticsCreate


class MonitoringRunNotFound(NotFound):
    kind, title = "monitoring-run-not-found", "Monitoring run not found"


class FollowUpWithoutData(Conflict):
    kind, title = "follow-up-without-data", "The follow-up has no rows"


def follow_up_request(*, session: Session, request: DatasetCreate) -> DatasetCreate:
    """A follow-up's registration with the model's declared schema.

    Raises:
        InvalidRequest: no such model (422, ``follow_up.model_id``), or a declared schema other
            than the model's (422, ``schema``).
    """
    assert request.follow_up is not None
    model_id = request.follow_up.model_id
    try:
        model = registry_service.get(session=session, model_id=model_id)
    except NotFound:  # a body's field, not the route's resource: 422
        raise InvalidRequest(f"model {model_id} does not exist", field="follow_up.model_id",
                             allowed="the id of a registered model") from None
    schema = registry_service.schema_of(model)
    if not request.follow_up.labelled and not isinstance(request.source, UploadSource):
        raise InvalidRequest("the generator's rows always carry their outcome: only an upload "
                             "is an unlabelled follow-up", field="follow_up.labelled",
                             allowed="true (or absent) for a synthetic source")
    if request.declared_schema is None:
        if not isinstance(request.source, UploadSource):
            return request  # the generator has its own schema: checked below
        return request.model_copy(update={"declared_schema": schema})
    if schema_hash(request.declared_schema) != registry_service.schema_hash_of(model):
        raise InvalidRequest(
            f"a follow-up of model {model.id} declares the model's schema (send none to take "
            "it)", field="schema", allowed=f"the schema of model {model.id}, or none")
    return request


def check_follow_up(model: TrainedModel, dataset: Dataset, *, needs_outcome: bool = True
                    ) -> None:
    """A run's follow-up: another cohort, with rows, of the model's declared schema; labelled
    unless the caller measures features only (``needs_outcome`` false: a monitoring run).

    Raises:
        InvalidRequest: the model's own training dataset, or another schema (422).
        DatasetUnlabelled: an unlabelled follow-up where the outcome is needed (422).
        FollowUpWithoutData: awaiting its rows, or erased (409).
    """
    if dataset.id == model.dataset_id:
        raise InvalidRequest(
            f"dataset {dataset.id} trained model {model.id}: a follow-up is a later cohort",
            field="dataset_id", allowed="a dataset other than the model's training dataset")
    if dataset.schema_hash != registry_service.schema_hash_of(model):
        raise InvalidRequest(
            f"dataset {dataset.id} is not of model {model.id}'s declared schema",
            field="dataset_id", allowed="a dataset of the model's declared schema")
    if needs_outcome:
        labels.check_labelled(dataset, needs=f"an evaluation of model {model.id}")
    if dataset.state != READY:
        raise FollowUpWithoutData(f"dataset {dataset.id} is {dataset.state}: send its rows "
                                  "first", field="dataset_id", state=dataset.state)


def reference_request(bins: list[FeatureBins], target_epsilon: float) -> StatisticsCreate:
    """The training cohort's feature histograms on the run's public bins, as a statistics
    release (one query per feature, equal shares, Gaussian)."""
    queries: list[dict[str, Any]] = [
        {"kind": "count", "by": [b.name]} if b.edges is None
        else {"kind": "histogram", "feature": b.name, "bins": b.edges} for b in bins]
    return StatisticsCreate.model_validate(
        {"queries": queries, "privacy": {"epsilon": target_epsilon}})


def reference_histograms(release: StatisticsRelease) -> dict[str, tuple[list[float], float]]:
    """Per feature, the reference release's noisy counts in bin order and their noise std."""
    found = {}
    for answer in release.answers:
        name = answer["feature"] or answer["by"][0]
        found[name] = ([float(c["value"]) for c in answer["cells"]],
                       float(answer["noise"][0]["scale"]))
    return found


def _reference(session: Session, model: TrainedModel, target: float) -> tuple[int | None, str]:
    """The model's reference release: an earlier run's, else a new one (in a savepoint, so a
    refusal leaves nothing behind); with a note when there is none."""
    earlier = session.scalar(select(MonitoringRun.reference_release_id).where(
        MonitoringRun.model_id == model.id, MonitoringRun.reference_release_id.is_not(None))
        .order_by(MonitoringRun.id).limit(1))
    if earlier is not None:
        return earlier, ""
    training = dataset_service.get(session=session, dataset_id=model.dataset_id)
    request = reference_request(schema_bins(registry_service.schema_of(model)), target)
    try:
        with session.begin_nested():
            release = statistics_service.release(session=session, dataset=training,
                                                 request=request)
    except (BudgetExceeded, Conflict) as refused:
        return None, (f"no data drift: the training dataset {training.id} could not take the "
                      f"reference release of its feature histograms ({refused.detail})")
    return release.id, ""


def noise_for(target: float, delta: float | None) -> float:
    """The run's noise multiplier: one Gaussian mechanism exactly at (target, delta)."""
    return 0.0 if delta is None else 1.0 / mechanisms.gaussian_mu(target, delta)


def queue_release(*, session: Session, dataset: Dataset, kind: JobKind, target: float,
                  payload: TaskPayload) -> Job:
    """Queue a job of one Gaussian release on ``dataset`` exactly at (``target``, its budget
    delta) and reserve it on its ledger (the filter admits it or refuses with the largest
    target that fits): a monitoring run's, a comparison's. Exact counts on a public dataset.

    Raises:
        BudgetExceeded (409): nothing is queued or charged.
    """
    delta = None if dataset.public else dataset.budget_delta
    noise = noise_for(target, delta)
    job = job_service.enqueue(session=session, job=Job(
        dataset_id=dataset.id, status=QUEUED, kind=kind, target_epsilon=target,
        requested_noise_multiplier=None, noise_multiplier=noise, sample_rate=None, steps=None,
        epochs=None, delta=delta if delta is not None else 0.0, max_grad_norm=None,
        training=None, payload=payload.model_dump(mode="json"), progress_epoch=0,
        epsilon_per_epoch=[], cancel_requested=False))
    if delta is not None:
        charge = ledger_statistics.ReleaseCharge(
            event=events.one_shot("gaussian", [noise]), delta=delta, target_epsilon=target)
        ledger_statistics.reserve_release(session=session, dataset=dataset, job_id=job.id,
                                          charge=charge)
    return job


def submit(*, session: Session, model_id: int, request: MonitoringRunCreate) -> MonitoringRun:
    """Queue a run and reserve its release on the follow-up's ledger, in one transaction.

    Raises:
        ModelNotFound, DatasetNotFound (404); InvalidRequest (422); FollowUpWithoutData (409);
        BudgetExceeded (409: the follow-up's filter or its patients' refuse the release,
            with the largest target that fits; nothing is queued or charged).
    """
    model = registry_service.get(session=session, model_id=model_id)
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    check_follow_up(model, dataset, needs_outcome=False)  # unlabelled: data drift only
    target = request.privacy.target_epsilon
    reference_id, note = _reference(session, model, target)
    job = queue_release(session=session, dataset=dataset, kind=MONITORING, target=target,
                        payload=MonitoringPayload(model_id=model.id,
                                                  notes=[note] if note else []))
    run = MonitoringRun(model_id=model.id, dataset_id=dataset.id, job_id=job.id,
                        reference_release_id=reference_id, target_epsilon=target)
    session.add(run)
    session.flush()
    return run


def get(*, session: Session, run_id: int) -> MonitoringRun:
    run = session.get(MonitoringRun, run_id)
    if run is None:
        raise MonitoringRunNotFound(f"monitoring run {run_id} does not exist", field="run_id")
    return run


def of_job(*, session: Session, job_id: int) -> MonitoringRun | None:
    return session.scalar(select(MonitoringRun).where(MonitoringRun.job_id == job_id))


def runs_of(*, session: Session, model_id: int) -> list[MonitoringRun]:
    """The model's runs, oldest first (the timeline)."""
    registry_service.get(session=session, model_id=model_id)  # 404 for an unknown model
    return list(session.scalars(select(MonitoringRun).where(MonitoringRun.model_id == model_id)
                                .order_by(MonitoringRun.id)))


def finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
