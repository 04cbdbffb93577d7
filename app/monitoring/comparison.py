"""Retrain from a monitoring run, and compare a champion with a challenger on a follow-up.

Retraining is an ordinary training job on the run's follow-up (or on a declared union of
cohorts that holds it, ``app.datasets.union``) with the model's recipe: the
same family, optimizer and its settings, tail average and seed; the size-dependent parts
(full batch or the same batch, epochs, clip norm) planned again for the follow-up by the same
public rules. Its spend is its dataset's patients', as any job's.

A comparison is one Gaussian release on the follow-up's **evaluation part** (rows neither
model trained on when the challenger was trained on the follow-up's training part): each
model's score-bin x outcome histograms on the champion's training-time bins, overall and per
subgroup grouping. One record is one cell of each of the 2 (1 + groupings) histograms, so the
L2 sensitivity is sqrt(2 (1 + groupings)), and the release is charged once on the follow-up's
ledger like a monitoring run. Whether the challenger is better is post-processing
(``worker.monitoring.comparison``); activating it stays a person's decision.
"""

from typing import Any

from sqlalchemy.orm import Session

from app.core.errors import InvalidRequest, NotFound
from app.datasets import service as dataset_service
from app.jobs import service as job_service
from app.jobs.models import COMPARISON, Job
from app.jobs.schemas import ErrorOut, JobCreate, PrivacyRequest, TrainingConfig
from app.monitoring import service as monitoring_service
from app.monitoring.comparison_schemas import (
    ComparisonCreate,
    ComparisonOut,
    ComparisonPayload,
    RetrainCreate,
)
from app.monitoring.models import MonitoringRun
from app.monitoring.schemas import MAX_EPSILON
from app.registry import service as registry_service

RECIPE_KEPT = ("model", "optimizer", "learning_rate", "momentum", "tail_average",
               "hidden_units", "seed", "world_size")
"""What a retraining job takes from the model's own job; the rest is planned for the
follow-up's size by the public rules (``app.jobs.recipe``)."""


class ComparisonNotFound(NotFound):
    kind, title = "comparison-not-found", "Comparison not found"


def retrain_request(*, session: Session, run: MonitoringRun,
                    request: RetrainCreate) -> JobCreate:
    """The training request that retrains the run's model on the run's follow-up."""
    model = registry_service.get(session=session, model_id=run.model_id)
    own = job_service.get(session=session, job_id=model.job_id)
    asked = own.training_request
    kept = {key: asked[key] for key in RECIPE_KEPT if key in asked}
    if (own.dp_sgd and own.dp_sgd_plan.sample_rate < 1
            and asked.get("batch_size") is not None):
        kept["batch_size"] = asked["batch_size"]  # mini-batch: the same batch
    if request.privacy is not None:
        target = request.privacy.target_epsilon
    elif own.target_epsilon is not None:
        target = own.target_epsilon
    else:
        raise InvalidRequest(f"model {model.id}'s job set a noise multiplier, not a target: "
                             "give privacy.target_epsilon", field="privacy.target_epsilon",
                             allowed=f"(0, {MAX_EPSILON:g}]")
    return JobCreate(dataset_id=_retrain_dataset(session, run, request),
                     privacy=PrivacyRequest(target_epsilon=target),
                     training=TrainingConfig.model_validate(kept))


def _retrain_dataset(session: Session, run: MonitoringRun, request: RetrainCreate) -> int:
    """The follow-up, or the declared union that holds it.

    Raises:
        InvalidRequest: a dataset that is not a union holding the follow-up (422).
    """
    if request.dataset_id is None or request.dataset_id == run.dataset_id:
        return run.dataset_id
    try:
        chosen = dataset_service.get(session=session, dataset_id=request.dataset_id)
    except NotFound:  # a body's field, not the route's resource: 422
        chosen = None
    if chosen is None or run.dataset_id not in (chosen.union_of or []):
        raise InvalidRequest(f"dataset {request.dataset_id} is not a union of cohorts that "
                             f"holds run {run.id}'s follow-up (dataset {run.dataset_id})",
                             field="dataset_id", allowed="a dataset with source kind union "
                             f"whose datasets include {run.dataset_id}, or null")
    return chosen.id


def submit(*, session: Session, champion_id: int, request: ComparisonCreate) -> Job:
    """Queue a comparison and reserve its release on the follow-up's ledger, in one
    transaction.

    Raises:
        ModelNotFound, DatasetNotFound (404); InvalidRequest (422: the same model twice, a
            model the follow-up trained is not the challenger, another schema, a model
            without a training-time release); FollowUpWithoutData, BudgetExceeded (409).
    """
    if request.challenger_id == champion_id:
        raise InvalidRequest("a model is not compared with itself", field="challenger_id",
                             allowed="another model of the same declared schema")
    champion = registry_service.get(session=session, model_id=champion_id)
    challenger = registry_service.get(session=session, model_id=request.challenger_id)
    dataset = dataset_service.get(session=session, dataset_id=request.dataset_id)
    monitoring_service.check_follow_up(champion, dataset)  # another cohort of its schema
    if registry_service.schema_hash_of(challenger) != dataset.schema_hash:
        raise InvalidRequest(f"model {challenger.id} is not of dataset {dataset.id}'s "
                             "declared schema", field="challenger_id",
                             allowed="a model of the follow-up's declared schema")
    if not (champion.metrics or {}).get("release"):
        raise InvalidRequest(f"model {champion.id} has no training-time evaluation release "
                             "whose bins both models could be scored on", field="model_id",
                             allowed="a model with a DP evaluation")
    notes = []
    if champion.dataset_id in (dataset.union_of or []):
        notes.append(f"dataset {dataset.id} is a union holding the champion's training dataset "
                     f"{champion.dataset_id}: the champion's figures may be optimistic")
    if challenger.dataset_id != dataset.id:
        notes.append(f"the challenger was trained on dataset {challenger.dataset_id}, not on "
                     "this follow-up: if their patients overlap, its figures may be optimistic")
    return monitoring_service.queue_release(
        session=session, dataset=dataset, kind=COMPARISON,
        target=request.privacy.target_epsilon,
        payload=ComparisonPayload(champion_id=champion.id, challenger_id=challenger.id,
                                  notes=notes))


def get(*, session: Session, comparison_id: int) -> Job:
    job = session.get(Job, comparison_id)
    if job is None or job.kind != COMPARISON:
        raise ComparisonNotFound(f"comparison {comparison_id} does not exist",
                                 field="comparison_id")
    return job


def describe(job: Job) -> ComparisonOut:
    """The comparison as served: its job and the results its worker stored."""
    asked = ComparisonPayload.model_validate(job.payload)
    results: dict[str, Any] = job.metrics or {}
    difference = results.get("difference")
    overall = (difference or {}).get("overall", {}).get("roc_auc") or {}
    return ComparisonOut(
        id=job.id, champion_id=asked.champion_id, challenger_id=asked.challenger_id,
        dataset_id=job.dataset_id, status=job.status, target_epsilon=job.target_epsilon or 0.0,
        delta=job.delta if job.delta > 0 else None, noise_multiplier=job.noise_multiplier,
        l2_sensitivity=results.get("l2_sensitivity"), champion=results.get("champion"),
        challenger=results.get("challenger"), difference=difference,
        verdict=overall.get("verdict") if difference else None,
        notes=list(results.get("notes") or asked.notes), error=ErrorOut.of(job),
        created_at=job.created_at, finished_at=job.finished_at)
