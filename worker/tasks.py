"""The training task step by step, and how a job row that trains is read (``claimed_*``).

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

from app.bands import model_thresholds
from app.flows import job_run
from app.flows.job_run import LoadedData, TrainedNetwork
from app.jobs import queue, recipe
from app.jobs import search as job_search
from app.jobs.models import CANCELLED, SUCCEEDED, Job
from app.jobs.schemas import TrainingConfig
from app.observability import job_metrics
from app.privacy.accounting import Mechanism, finite_or_none
from app.privacy.parallel import held_out_noise
from worker.calibration import Calibration, calibrate_if_meaningful
from worker.evaluation import evaluate
from worker.handlers import NO_SPEC as NO_SPEC
from worker.handlers import ClaimedJob as ClaimedJob
from worker.handlers import JobWorker as JobWorker
from worker.held_out_floors import held_out_warnings
from worker.launch import train_distributed
from worker.training import (
    EpochCallback,
    TrainingResult,
    TrainingSpec,
    epsilon_of,
    predict_proba,
    train,
)

History = list[tuple[float, float, int]]


class LeaseLost(RuntimeError):
    """Another party (the reaper) took the job back; this worker must not write results."""


def claimed_training(job: Job) -> ClaimedJob:
    """A training job as its handler reads it: its spec and, for a search, the search's plan."""
    return ClaimedJob(job.id, job.dataset_id, spec_of(job), job.kind,
                      job_search.stored_plan(job.training))


def claimed_spec(job: Job) -> ClaimedJob:
    """A job that trains by its stored spec alone (a privacy audit's target training)."""
    return ClaimedJob(job.id, job.dataset_id, spec_of(job), job.kind)


def spec_of(job: Job) -> TrainingSpec:
    """The job's training plan; a setting its stored request lacks takes the API's default,
    except the optimizer: a job stored before requests named one keeps the SGD it was planned
    with (``recipe.LEGACY_OPTIMIZER``, and then its stored learning rate).

    The stored request is not validated again: it was at submission, and its resolved
    full-batch size (the training rows) may exceed what a request may ask for.
    """
    config = TrainingConfig.model_construct(
        **{k: v for k, v in job.training.items() if k in TrainingConfig.model_fields}
    )
    assert config.batch_size is not None  # resolved when the job was planned
    optimizer = str(job.training.get("optimizer", recipe.LEGACY_OPTIMIZER))
    learning_rate = job.training.get("learning_rate") or recipe.default_learning_rate(
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


REPORTS_PER_JOB = 20


def report_interval(epochs: int) -> int:
    """Epochs between progress reports (and ledger commits, cancel checks, lease renewals).

    A full-batch job runs hundreds of one-step epochs: reporting each would cost a database
    transaction and a chain record per step. About ``REPORTS_PER_JOB`` reports per job, and
    always one after the last epoch. A job stops (cancel, shutdown) only at a report, so its
    committed steps are exactly the steps it ran.
    """
    return max(1, math.ceil(epochs / REPORTS_PER_JOB))


def _epsilons(history: History, delta: float) -> tuple[float, float]:
    """(PRV, RDP) epsilon so far; a non-private run records no history and is infinite."""
    return epsilon_of(history, delta) if history else (math.inf, math.inf)


def progress_callback(worker: JobWorker, claimed: ClaimedJob) -> EpochCallback:
    """After each epoch: at a report, record progress and commit the steps taken; False stops.

    Raises (from the callback):
        LeaseLost: the job was reaped meanwhile; training must stop touching data now.
    """
    spec = claimed.spec
    every = report_interval(spec.epochs)

    def callback(epoch: int, history: History) -> bool:
        if worker.heartbeat is not None and worker.heartbeat.lost.is_set():
            raise LeaseLost(claimed.job_id)  # reaped meanwhile: stop touching data now
        if epoch % every and epoch != spec.epochs:
            return True  # between reports: no database round trip, no accounting
        eps_prv, eps_rdp = _epsilons(history, spec.delta)
        # Steps actually taken (the accountant's history); the planned count when non-private.
        steps = sum(n for _, _, n in history) or epoch * (spec.steps // spec.epochs)
        progress = queue.EpochProgress(
            epoch, steps, finite_or_none(eps_prv), finite_or_none(eps_rdp)
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


def train_step(worker: JobWorker, claimed: ClaimedJob, loaded: LoadedData) -> TrainingResult:
    """The train step: DP-SGD on the training part, in this process or across
    ``world_size`` processes under torchrun."""
    on_epoch = progress_callback(worker, claimed)
    encoder = loaded.encoder
    x, y = loaded.split.train.x, loaded.split.train.y
    if claimed.spec.world_size > 1:  # torchrun; stops only at reports, as below
        return train_distributed(
            x, y, claimed.spec, device=worker.device, on_epoch=on_epoch,
            sync_every=report_interval(claimed.spec.epochs), encoder=encoder,
            planned_rows=loaded.split.train.rows,
        )
    return train(x, y, claimed.spec, device=worker.device, on_epoch=on_epoch, encoder=encoder,
                 planned_rows=loaded.split.train.rows)


def _end_stopped(worker: JobWorker, claimed: ClaimedJob) -> str:
    """A run stopped at a report: cancelled, or the worker is shutting down."""
    reason = "cancelled" if not worker.stop_requested.is_set() else "worker stopping"
    finish(worker, claimed.job_id, CANCELLED, error_code=reason.replace(" ", "_"), error=reason)
    return CANCELLED


def evaluate_step(spec: TrainingSpec, result: TrainingResult, loaded: LoadedData, *,
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
    split, encoder = loaded.split, loaded.encoder
    eps_prv, eps_rdp = _epsilons(result.history, spec.delta)
    history = [Mechanism(*step) for step in result.history]
    if calibrated is not None:
        calibration, noise, eps_prv = calibrated
        eps_rdp = eps_prv  # a search's figure is its RDP (app.privacy.selection)
    else:
        noise = held_out_noise(history, loaded.held_out_deltas(spec.delta),
                               lambda delta: _epsilons(result.history, delta)[0])
        calibration = calibrate_if_meaningful(
            result.network, split.calibration.x, split.calibration.y,
            history=history, delta=spec.delta, training_epsilon=eps_prv, encoder=encoder,
            noise_multiplier=noise, rows=split.calibration.rows,
        )
    evaluation = split.evaluation
    metrics = evaluate(
        evaluation.y,
        predict_proba(result.network, evaluation.x, encoder),
        groups=evaluation.groups,
        noise_multiplier=noise,
        band_thresholds=model_thresholds(encoder.schema.outcome.bands),  # as job_run.commit
        rng=np.random.default_rng(),
    )
    metrics["calibration"] = calibration.as_dict()
    metrics["search"] = None  # a search's best run: worker.search fills it
    metrics["federation"] = None  # a federated model's federation: worker.federated_site's
    metrics["held_out_warnings"] = held_out_warnings(  # parts below their size floor
        calibration=calibration, metrics=metrics, evaluation_rows=evaluation.rows,
        epsilon=eps_prv,
        history=None if calibrated is not None else history)  # a search's: the size floor
    return TrainedNetwork(
        network=result.network, kind=spec.kind, hidden_units=spec.hidden_units,
        calibration_method=calibration.method, metrics=metrics, epsilon=eps_prv,
        epsilon_rdp=eps_rdp, delta=spec.delta, schema=encoder.schema,
    )


def run_training(worker: JobWorker, claimed: ClaimedJob) -> str:
    """A claimed training job's steps in order: load, train, evaluate, store, commit; or end
    where a stop was asked (cancelled). Returns the job's final status."""
    started = time.monotonic()
    with worker.database.session_scope() as session:
        loaded = job_run.load(session=session, dataset_id=claimed.dataset_id,
                              job_id=claimed.job_id)
    result = train_step(worker, claimed, loaded)
    if result.stopped_early:
        return _end_stopped(worker, claimed)
    trained = evaluate_step(claimed.spec, result, loaded)
    sha = job_run.store(trained=trained)
    with worker.database.session_scope() as session:
        model = job_run.commit(
            session=session, job_id=claimed.job_id, dataset_id=claimed.dataset_id,
            worker_id=worker.worker_id, trained=trained, artifact_sha256=sha,
        )
        if model is None:
            raise LeaseLost(claimed.job_id)
    job_metrics.observe_training(steps=claimed.spec.steps, sample_rate=claimed.spec.sample_rate,
                                 training_rows=loaded.split.train.rows,
                                 seconds=time.monotonic() - started)
    return SUCCEEDED
