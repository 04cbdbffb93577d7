"""A training job's hyper-parameter search, run as Papernot and Steinke's repeat-and-select.

The plan (``app.jobs.search``) and its charge (``app.privacy.selection``): the whole search is
one ledger entry, ``RepeatAndSelectDpEvent(one run, mean, shape)``. Here, in order:

1. commit the whole entry before any record is touched (it is one indivisible release);
2. draw K, the number of runs, from the declared distribution with fresh OS entropy;
3. execute M runs, M the plan's public count (``app.privacy.selection.executed_runs``), whatever
   K: each draws a candidate uniformly from the public list (OS entropy), trains DP-SGD with
   the job's noise, sample rate and steps, and releases the calibration part's binned counts
   (``worker.calibration``, one Gaussian no costlier than the run: parallel composition inside
   the run); its score is the DP log-loss of the Platt map fitted to those counts
   (post-processing of the run's own release);
4. of the first min(K, M) runs, the one with the lowest score is the job's model, calibrated by
   its own release (the calibration part is not used again), then evaluated on the evaluation
   part as every job is (``worker.tasks.evaluate_step``, noise no costlier than one run, so
   than the search). Runs past K are discarded. K = 0 (Poisson only) releases nothing: after
   its M runs, the job fails (``search_no_runs``), its charge kept.

Only the best run is released: its candidate, model, calibration and score. K and the other
runs (their candidates, scores) stay here, since the bound covers the best run alone. Nothing a
data scientist reads depends on K: the job runs M runs whatever K, so its timestamps, its
duration in the metrics and the worker's log lines do not tell K; its progress shows the start
and the end of the search, never a run count. Executing min(K, M) runs rather than K differs
from the analysed search only when K > M, whose price is part of the job's delta
(``app.privacy.accounting.SELECTION_TAIL_SHARE``).
"""

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.flows import job_run
from app.flows.job_run import LoadedData
from app.jobs import queue
from app.jobs import search as job_search
from app.jobs.models import CANCELLED, FAILED, SUCCEEDED, Job
from app.observability import job_metrics
from app.privacy import accounting, selection
from app.privacy.accounting import Mechanism, finite_or_none
from app.privacy.parallel import held_out_noise
from worker import calibration as calibration_release
from worker.launch import train_distributed
from worker.tasks import (
    ClaimedJob,
    JobWorker,
    LeaseLost,
    TrainPayload,
    evaluate_step,
    finish,
    report_interval,
    run_training,
)
from worker.training import EpochCallback, TrainingResult, TrainingSpec, predict_log_odds, train

NO_RUNS = "search_no_runs"
SCORE = "dp_log_loss"


@dataclass
class Run:
    """One run's released output: its candidate, model, calibration record and score."""

    candidate: int
    result: TrainingResult
    calibration: calibration_release.Calibration
    score: float


def run_spec(spec: TrainingSpec, changes: dict[str, Any]) -> TrainingSpec:
    """The job's spec with a candidate's changes (never its noise, sample rate or steps)."""
    fields = {"model": "kind", "optimizer": "optimizer", "learning_rate": "learning_rate",
              "momentum": "momentum", "max_grad_norm": "max_grad_norm",
              "tail_average": "tail_average", "hidden_units": "hidden_units"}
    return dataclasses.replace(spec, **{fields[k]: v for k, v in changes.items() if k in fields})


def search_epsilon(spec: TrainingSpec, plan: dict[str, Any]) -> float:
    """The whole search's epsilon at the job's delta (its ledger figure)."""
    run = job_search.run_event(spec.kind, spec.noise_multiplier, spec.sample_rate, spec.steps)
    return selection.search_epsilon(job_search.event_of(plan, run), spec.delta)


def _record(worker: JobWorker, claimed: ClaimedJob[TrainPayload], epoch: int,
            epsilon: float) -> bool:
    """Progress at the search's start (epoch 0, committing the whole entry) or end; returns
    whether a cancel was asked. Raises LeaseLost when the job is no longer this worker's."""
    progress = queue.EpochProgress(epoch, 1, finite_or_none(epsilon), finite_or_none(epsilon))
    with worker.database.session_scope() as session:
        owned, cancel = queue.record_epoch(session=session, job_id=claimed.job_id,
                                           worker_id=worker.worker_id, progress=progress,
                                           lease_seconds=worker.lease_seconds)
    if not owned:
        raise LeaseLost(claimed.job_id)
    return cancel


def _cancel_asked(worker: JobWorker, claimed: ClaimedJob[TrainPayload]) -> bool:
    with worker.database.session_scope() as session:
        job = session.get(Job, claimed.job_id, populate_existing=True)
        return job is None or bool(job.cancel_requested)


def _stop_check(worker: JobWorker) -> EpochCallback:
    """Within a run: stop touching data at once when the lease is lost or the worker stops
    (no progress recorded: it would count the runs)."""
    def callback(epoch: int, history: list[tuple[float, float, int]]) -> bool:
        if worker.heartbeat is not None and worker.heartbeat.lost.is_set():
            raise LeaseLost(-1)
        return not worker.stop_requested.is_set()

    return callback


def one_run(worker: JobWorker, loaded: LoadedData, spec: TrainingSpec, candidate: int,
            noise: float, rng: np.random.Generator) -> Run:
    """Train one candidate, release its calibration counts and score it."""
    x, y = loaded.split.train.x, loaded.split.train.y
    on_epoch = _stop_check(worker)
    if spec.world_size > 1:
        result = train_distributed(x, y, spec, device=worker.device, on_epoch=on_epoch,
                                   sync_every=report_interval(spec.epochs),
                                   encoder=loaded.encoder, planned_rows=loaded.split.train.rows)
    else:
        result = train(x, y, spec, device=worker.device, on_epoch=on_epoch,
                       encoder=loaded.encoder, planned_rows=loaded.split.train.rows)
    part = loaded.split.calibration
    released = calibration_release.calibrate(
        predict_log_odds(result.network, part.x, loaded.encoder), part.y, noise, rng,
        prior=calibration_release.prior_for([Mechanism(*step) for step in result.history]))
    released = dataclasses.replace(released, rows=part.rows)  # public: never the arrays' length
    floor = calibration_release.NOISE_FLOOR * noise * calibration_release.SENSITIVITY
    score = calibration_release.binned_log_loss(
        np.asarray(released.noisy_counts), np.asarray(released.noisy_positives),
        released.slope, released.intercept, min_count=floor)
    return Run(candidate, result, released, score)


def kept_calibration(run: Run, noise: float) -> calibration_release.Calibration:
    """The best run's calibration: its own release, folded into its model where the part
    meets its size floor (``worker.calibration.calibrate_if_meaningful``'s rule), else the
    model's own probabilities kept."""
    if len(run.calibration.noisy_counts) and run.calibration.rows >= \
            calibration_release.size_floor_rows(noise):
        calibration_release.fold_into(run.result.network, run.calibration)
        return run.calibration
    return calibration_release.withheld(run.calibration.rows, noise)


class Stopped(Exception):
    """The search stopped before its end: cancelled, or the worker is shutting down."""


def best_of_runs(worker: JobWorker, loaded: LoadedData, spec: TrainingSpec,
                 plan: dict[str, Any], noise: float, rng: np.random.Generator,
                 stop: Callable[[], str | None], executed: int) -> Run | None:
    """Draw K, run ``executed`` (M) candidates drawn uniformly whatever K, return the
    lowest-scored of the first min(K, M) (None: K = 0). Every run is trained, calibrated and
    scored alike, used or not, so the time taken does not depend on K.

    Args:
        noise: the calibration release's noise multiplier (no costlier than one run).
        stop: before each run, why to stop (None: go on).
        executed: M, the plan's public number of runs.

    Raises:
        Stopped: ``stop`` gave a reason, or a run stopped early.
    """
    used = selection.draw_runs(plan["runs"], float(plan["mean_runs"]), job_search.shape_of(plan),
                               rng)
    best: Run | None = None
    for index in range(executed):
        reason = stop()
        if reason is not None:
            raise Stopped(reason)
        candidate = int(rng.integers(len(plan["candidates"])))
        run = one_run(worker, loaded, run_spec(spec, plan["candidates"][candidate]), candidate,
                      noise, rng)
        if run.result.stopped_early:
            raise Stopped("worker stopping")
        if index < used and (best is None or run.score < best.score):
            best = run
    return best


def held_out_noise_of(spec: TrainingSpec, deltas: list[float]) -> float:
    """The held-out releases' noise: no costlier than one run (so than the search), at each
    of ``deltas`` (``LoadedData.held_out_deltas``: the job's, and those the ledger reads the
    dataset's releases at; ``app.privacy.parallel``)."""
    run = [Mechanism(spec.noise_multiplier, spec.sample_rate, spec.steps)]
    tight = accounting.create_accountant("prv")
    return held_out_noise(run, deltas, lambda delta: tight.epsilon(run, delta))


def run_search(worker: JobWorker, claimed: ClaimedJob[TrainPayload]) -> str:
    """A claimed search job: commit, draw K, run, keep the best, evaluate, store, commit."""
    plan, spec = claimed.payload.search, claimed.payload.spec
    assert plan is not None
    started, total = time.monotonic(), search_epsilon(spec, plan)
    executed = job_search.executed_of(plan, job_search.run_event(
        spec.kind, spec.noise_multiplier, spec.sample_rate, spec.steps), spec.delta)
    with worker.database.session_scope() as session:
        loaded = job_run.load(session=session, dataset_id=claimed.dataset_id,
                              job_id=claimed.job_id)
    noise = held_out_noise_of(spec, loaded.held_out_deltas(spec.delta))
    if _record(worker, claimed, 0, total):
        return _end(worker, claimed, CANCELLED, "cancelled")

    def stop() -> str | None:
        if worker.stop_requested.is_set():
            return "worker stopping"
        return "cancelled" if _cancel_asked(worker, claimed) else None

    try:  # fresh OS entropy: K and the draws are nobody's to replay
        best = best_of_runs(worker, loaded, spec, plan, noise, np.random.default_rng(), stop,
                            executed.runs)
    except Stopped as stopped:
        return _end(worker, claimed, CANCELLED, str(stopped))
    if best is None:
        return _end(worker, claimed, FAILED, "the search drew no run (a Poisson number of runs "
                    "can be 0): nothing was released; the privacy charge is kept", NO_RUNS)
    chosen = run_spec(spec, plan["candidates"][best.candidate])
    trained = evaluate_step(chosen, best.result, loaded,
                            calibrated=(kept_calibration(best, noise), noise, total))
    trained.metrics["search"] = record(plan, best, executed, total)
    # PLD has no repeat-and-select: the model's epsilon is RDP's figure, and says so
    trained = dataclasses.replace(trained, accountant="rdp")
    _record(worker, claimed, spec.epochs, total)
    sha = job_run.store(trained=trained)
    with worker.database.session_scope() as session:
        model = job_run.commit(session=session, job_id=claimed.job_id,
                               dataset_id=claimed.dataset_id, worker_id=worker.worker_id,
                               trained=trained, artifact_sha256=sha)
        if model is None:
            raise LeaseLost(claimed.job_id)
    job_metrics.observe_training(steps=executed.runs * spec.steps, sample_rate=spec.sample_rate,
                                 training_rows=loaded.split.train.rows,
                                 seconds=time.monotonic() - started)
    return SUCCEEDED


def record(plan: dict[str, Any], best: Run, executed: selection.Executed,
           epsilon: float) -> dict[str, Any]:
    """What the job releases of its search (``app.jobs.results.SearchRecord``): the best run,
    and the public M with its tail (``epsilon``: the search's, at the job's delta)."""
    return {
        "chosen_candidate": best.candidate,
        "chosen": plan["candidates"][best.candidate],
        "score": SCORE,
        "chosen_score": None if not math.isfinite(best.score) else best.score,
        "executed_runs": executed.runs,
        "tail_probability": executed.tail_probability,
        "tail_delta": selection.tail_delta(epsilon, executed.tail_probability),
        "note": "the best run of a random number K of DP-SGD runs (Papernot and Steinke 2022), "
                "scored by the DP log-loss of its calibration part's release; "
                f"{executed.runs} runs were executed whatever K and the best of the first K "
                "kept, so the number used is hidden, as are the other runs; "
                f"K > {executed.runs} (probability {executed.tail_probability:.2g}) is covered "
                "by tail_delta, part of the job's delta",
    }


def _end(worker: JobWorker, claimed: ClaimedJob[TrainPayload], status: str, message: str,
         code: str | None = None) -> str:
    """End the search without a model; its entry stays charged in full (committed at the
    start: data may have been touched)."""
    finish(worker, claimed.job_id, status, error_code=code or message.replace(" ", "_"),
           error=message)
    return status


def run_train(worker: JobWorker, claimed: ClaimedJob[TrainPayload]) -> str:
    """A training job: one run, or a search's runs when its stored plan asks for several."""
    if claimed.payload.search is not None:
        return run_search(worker, claimed)
    return run_training(worker, claimed)
