"""The training task step by step, and how a job row that trains is read (``parse_training``).

Tasks are registered by kind name (``worker.handlers``). A task runs one claimed job to its
end (it finishes the job itself) and returns the outcome for the worker's log. It raises
``LeaseLost`` when the job was taken back meanwhile (nothing more may be written for it); any
other exception fails the job (``worker.runner``).

Training (``run_training``) is six named steps; the four that cross domains are flows
(``app.flows.job_run``), the two that are DP-SGD and its held-out releases are here:
claim (``job_run.claim``, by ``worker.runner``), load (``job_run.load``), train (``train_step``:
progress, spend committed and a stop checked at each report), evaluate (``evaluate_step``:
calibrate and evaluate on the held-out parts), store (``job_run.store``: the artifact), commit
(``job_run.commit``: the job finished, its ledger entry settled, its model registered, in one
transaction).
"""

import math
import time
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from app.bands import model_thresholds
from app.families import DEFAULT_FAMILY, create_family
from app.families.base import DEFAULT_HIDDEN_UNITS
from app.flows import job_run
from app.flows.job_run import LoadedData, TrainedNetwork
from app.jobs import queue, recipe
from app.jobs import search as job_search
from app.jobs import service as job_service
from app.jobs.models import CANCELLED, SUCCEEDED, Job, NotDpSgd
from app.jobs.schemas import TaskPayload, TrainingConfig
from app.observability import job_metrics
from app.privacy.accounting import epsilon_by_accountant, finite_or_none
from app.privacy.parallel import held_out_noise
from worker.calibration import Calibration, calibrate_if_meaningful
from worker.evaluation import evaluate
from worker.handlers import ClaimedJob as ClaimedJob
from worker.handlers import JobWorker as JobWorker
from worker.held_out_floors import held_out_warnings
from worker.trainers import FitPlan, FittedModel, OnReport, Report, trainer_for
from worker.trainers import report_interval as report_interval
from worker.trainers.base import REPORTS_PER_JOB as REPORTS_PER_JOB
from worker.trainers.base import History, check_spent
from worker.trainers.dp_sgd import fitted_of
from worker.training import TrainingResult, TrainingSpec, predict_proba


class LeaseLost(RuntimeError):
    """Another party (the reaper) took the job back; this worker must not write results."""


class TrainPayload(TaskPayload):
    """The ``train`` kind's payload: what its trainer fits (``plan``: its family, settings and
    reserved release, with DP-SGD's spec inside) and, for a search, the search's plan
    (``app.jobs.search``, kept in the stored training request it varies)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    plan: FitPlan
    search: dict[str, Any] | None = None

    @property
    def spec(self) -> TrainingSpec:
        """DP-SGD's spec (a DP-SGD run's, a search's).

        Raises:
            NotDpSgd: the job is a fitted family's (its trainer is not DP-SGD).
        """
        if self.plan.spec is None:
            raise NotDpSgd(f"a {self.plan.kind} job is not DP-SGD")
        return self.plan.spec


# FitPlan names TrainingSpec for type checkers only (worker.trainers.base): resolve it here.
TrainPayload.model_rebuild(_types_namespace={"TrainingSpec": TrainingSpec})


def parse_training(job: Job) -> TrainPayload:
    """A training job's payload: its fit plan (its DP-SGD spec, or a fitted family's
    release) and, for a search, the search's plan."""
    return TrainPayload(plan=fit_plan_of(job, spec_of(job) if job.dp_sgd else None),
                        search=job_search.stored_plan(job.training_request))


def fit_plan_of(job: Job, spec: TrainingSpec | None) -> FitPlan:
    """What the job's trainer fits: its family and settings, and what the ledger reserved
    (``job_service.release_event``); DP-SGD's ``spec`` where the job is DP-SGD."""
    training = job.training_request
    if spec is not None:
        kind, hidden_units, seed = spec.kind, spec.hidden_units, spec.seed
    else:
        kind = str(training.get("model", DEFAULT_FAMILY))
        hidden_units = int(training.get("hidden_units", DEFAULT_HIDDEN_UNITS))
        seed = int(training.get("seed", 0))
    return FitPlan(kind=kind, hidden_units=hidden_units, delta=job.delta, seed=seed,
                   settings=dict(training), event=job_service.release_event(job), spec=spec)


def spec_of(job: Job) -> TrainingSpec:
    """The job's training plan; a setting its stored request lacks takes the API's default,
    except the optimizer: a job stored before requests named one keeps the SGD it was planned
    with (``recipe.LEGACY_OPTIMIZER``, and then its stored learning rate).

    The stored request is not validated again: it was at submission, and its resolved
    full-batch size (the training rows) may exceed what a request may ask for.
    """
    config = TrainingConfig.model_construct(
        **{k: v for k, v in job.training_request.items() if k in TrainingConfig.model_fields}
    )
    assert config.batch_size is not None  # resolved when the job was planned
    optimizer = str(job.training_request.get("optimizer", recipe.LEGACY_OPTIMIZER))
    learning_rate = job.training_request.get("learning_rate") or recipe.default_learning_rate(
        optimizer, config.model)
    plan = job.dp_sgd_plan
    return TrainingSpec(
        kind=config.model,
        hidden_units=int(config.hidden_units),
        epochs=plan.epochs,
        batch_size=int(config.batch_size),
        learning_rate=float(learning_rate),
        momentum=float(config.momentum),
        tail_average=float(config.tail_average),
        max_grad_norm=plan.max_grad_norm,
        noise_multiplier=plan.noise_multiplier,
        sample_rate=plan.sample_rate,
        steps=plan.steps,
        delta=job.delta,
        seed=int(config.seed),
        world_size=int(config.world_size),
        optimizer=optimizer,
    )


def finish(worker: JobWorker, job_id: int, status: str, **fields: Any) -> None:
    """End a job this worker owns (and settle its ledger entry); a no-op if it no longer is."""
    with worker.database.session_scope() as session:
        queue.finish(session=session, job_id=job_id, worker_id=worker.worker_id, status=status,
                     **fields)


def _epsilons(spent: History, delta: float) -> tuple[float, float]:
    """(PRV, RDP) epsilon so far; a non-private run records no history and is infinite."""
    if not spent:
        return math.inf, math.inf
    figures = epsilon_by_accountant(spent, delta)
    return figures["prv"], figures["rdp"]


def progress_callback(worker: JobWorker, claimed: ClaimedJob[TrainPayload]) -> OnReport:
    """After each unit of work: at a report, record progress and commit what was spent;
    False stops.

    Raises (from the callback):
        LeaseLost: the job was reaped meanwhile; training must stop touching data now.
    """
    delta = claimed.payload.plan.delta

    def callback(report: Report) -> bool:
        if worker.heartbeat is not None and worker.heartbeat.lost.is_set():
            raise LeaseLost(claimed.job_id)  # reaped meanwhile: stop touching data now
        if report.epoch % report_interval(report.epochs) and report.epoch != report.epochs:
            return True  # between reports: no database round trip, no accounting
        eps_prv, eps_rdp = _epsilons(report.spent, delta)
        progress = queue.EpochProgress(
            report.epoch, report.steps, finite_or_none(eps_prv), finite_or_none(eps_rdp)
        )
        with worker.database.session_scope() as session:
            owned, cancel = queue.record_epoch(
                session=session,
                job_id=claimed.job_id,
                worker_id=worker.worker_id,
                progress=progress,
                lease_seconds=worker.lease_seconds,
            )
        if not owned:
            raise LeaseLost(claimed.job_id)
        return not cancel and not worker.stop_requested.is_set()

    return callback


def train_step(worker: JobWorker, claimed: ClaimedJob[TrainPayload],
               loaded: LoadedData) -> FittedModel:
    """The train step: the family's trainer fits the training part (DP-SGD by default, in
    this process or across ``world_size`` processes under torchrun)."""
    plan = claimed.payload.plan
    trainer = trainer_for(create_family(plan.kind))
    fitted = trainer.fit(plan, loaded, progress_callback(worker, claimed), device=worker.device)
    check_spent(plan, fitted)  # never more than the ledger reserved
    return fitted


def _end_stopped(worker: JobWorker, claimed: ClaimedJob[BaseModel]) -> str:
    """A run stopped at a report: cancelled, or the worker is shutting down."""
    reason = "cancelled" if not worker.stop_requested.is_set() else "worker stopping"
    finish(worker, claimed.job_id, CANCELLED, error_code=reason.replace(" ", "_"), error=reason)
    return CANCELLED


def evaluate_step(spec: TrainingSpec | FitPlan, result: TrainingResult | FittedModel,
                  loaded: LoadedData, *,
                  calibrated: tuple[Calibration, float, float] | None = None) -> TrainedNetwork:
    """The evaluate step: calibrate on the calibration part, then evaluate the calibrated
    model on the evaluation part.

    Each is one DP release on its own part, disjoint from training and from each other by the
    records' coins, and no costlier than the training at any order, nor at the job's delta,
    the budget's or the patient space's (the filters' first-release rule reads the training
    there), checked before anything is released: parallel composition, no extra spend
    (``app.privacy.parallel``).

    ``calibrated``: (its calibration, the held-out noise, the whole charge's epsilon) of a
    model a search already calibrated (``worker.search``: its run's release chose it).
    """
    fitted = result if isinstance(result, FittedModel) else fitted_of(result)
    split, encoder, delta = loaded.split, loaded.encoder, spec.delta
    eps_prv, eps_rdp = _epsilons(fitted.spent, delta)
    history = list(fitted.spent)
    if calibrated is not None:
        calibration, noise, eps_prv = calibrated
        eps_rdp = eps_prv  # a search's figure is its RDP (app.privacy.selection)
    else:
        noise = held_out_noise(history, loaded.held_out_deltas(delta),
                               lambda at: _epsilons(fitted.spent, at)[0])
        calibration = calibrate_if_meaningful(
            fitted.network, split.calibration.x, split.calibration.y,
            history=history, delta=delta, training_epsilon=eps_prv, encoder=encoder,
            noise_multiplier=noise, rows=split.calibration.rows,
        )
    evaluation = split.evaluation
    metrics = evaluate(
        evaluation.y,
        predict_proba(fitted.network, evaluation.x, encoder),
        groups=evaluation.groups,
        noise_multiplier=noise,
        band_thresholds=model_thresholds(encoder.schema.outcome.bands),  # as job_run.commit
        rng=np.random.default_rng(),
        public_rows=evaluation.rows,
    )
    metrics["calibration"] = calibration.as_dict()
    metrics["search"] = None  # a search's best run: worker.search fills it
    metrics["federation"] = None  # a federated model's federation: worker.federated_site's
    metrics["held_out_warnings"] = held_out_warnings(  # parts below their size floor
        calibration=calibration, metrics=metrics, evaluation_rows=evaluation.rows,
        epsilon=eps_prv,
        history=None if calibrated is not None else history)  # a search's: the size floor
    return TrainedNetwork(
        network=fitted.network, kind=spec.kind, hidden_units=spec.hidden_units,
        calibration_method=calibration.method, metrics=metrics, epsilon=eps_prv,
        epsilon_rdp=eps_rdp, delta=delta, schema=encoder.schema,
        artifact_config=fitted.artifact_config,
    )


def run_training(worker: JobWorker, claimed: ClaimedJob[TrainPayload]) -> str:
    """A claimed training job's steps in order: load, train, evaluate, store, commit; or end
    where a stop was asked (cancelled). Returns the job's final status."""
    started = time.monotonic()
    with worker.database.session_scope() as session:
        loaded = job_run.load(session=session, dataset_id=claimed.dataset_id,
                              job_id=claimed.job_id)
    result = train_step(worker, claimed, loaded)
    if result.stopped_early:
        return _end_stopped(worker, claimed)
    plan = claimed.payload.plan
    trained = evaluate_step(plan, result, loaded)
    sha = job_run.store(trained=trained)
    with worker.database.session_scope() as session:
        model = job_run.commit(
            session=session, job_id=claimed.job_id, dataset_id=claimed.dataset_id,
            worker_id=worker.worker_id, trained=trained, artifact_sha256=sha,
        )
        if model is None:
            raise LeaseLost(claimed.job_id)
    if plan.spec is not None:  # DP-SGD's steps and sample rate
        job_metrics.observe_training(steps=plan.spec.steps, sample_rate=plan.spec.sample_rate,
                                     training_rows=loaded.split.train.rows,
                                     seconds=time.monotonic() - started)
    return SUCCEEDED
