"""The worker: claim -> train -> evaluate -> store -> finish, with heartbeats and a clean stop.

Runs as its own process (``dpcrisis worker``) or as a thread inside the API (``dpcrisis serve``).
"""

import logging
import math
import os
import socket
import threading
import traceback
from dataclasses import dataclass

import torch

from app.core.database import Database, get_database
from app.core.logs import job_context
from app.core.settings import settings
from app.datasets import service as dataset_service
from app.features import FEATURE_NAMES, SCALING
from app.jobs import notify, queue
from app.jobs.models import CANCELLED, FAILED, PRIVACY_AUDIT, SUCCEEDED, TRAIN, Job
from app.privacy.accounting import Mechanism, finite_or_none
from app.registry import artifacts
from app.registry import service as registry_service
from app.registry.models import TrainedModel
from worker.calibration import calibrate_model
from worker.evaluation import evaluate
from worker.heartbeat import Heartbeat
from worker.launch import train_distributed
from worker.privacy_audit.job import run_audit_job
from worker.training import TrainingSpec, epsilon_of, pick_device, predict_proba, train

logger = logging.getLogger("dpcrisis.worker")


class LeaseLost(RuntimeError):
    """Another party (the reaper) took the job back; this worker must not write results."""


@dataclass(frozen=True)
class ClaimedJob:
    job_id: int
    dataset_id: int
    spec: TrainingSpec
    kind: str = TRAIN  # PRIVACY_AUDIT jobs go to worker.privacy_audit


def _spec_of(job: Job) -> TrainingSpec:
    t = job.training
    return TrainingSpec(
        kind=t["model"],
        hidden_units=int(t.get("hidden_units", 16)),
        epochs=job.epochs,
        batch_size=int(t["batch_size"]),
        learning_rate=float(t["learning_rate"]),
        momentum=float(t.get("momentum", 0.0)),
        tail_average=float(t.get("tail_average", 0.0)),
        max_grad_norm=job.max_grad_norm,
        noise_multiplier=job.noise_multiplier,
        sample_rate=job.sample_rate,
        steps=job.steps,
        delta=job.delta,
        seed=int(t.get("seed", 0)),
        world_size=int(t.get("world_size", 1)),
    )


def _epsilons(history: list[tuple[float, float, int]], delta: float) -> tuple[float, float]:
    """(PRV, RDP) epsilon so far; a non-private run records no history and is infinite."""
    return epsilon_of(history, delta) if history else (math.inf, math.inf)


REPORTS_PER_JOB = 20


def report_interval(epochs: int) -> int:
    """Epochs between progress reports (and ledger commits, cancel checks, lease renewals).

    A full-batch job runs hundreds of one-step epochs: reporting each would cost a database
    transaction and a chain record per step. About ``REPORTS_PER_JOB`` reports per job, and
    always one after the last epoch. A job stops (cancel, shutdown) only at a report, so its
    committed steps are exactly the steps it ran.
    """
    return max(1, math.ceil(epochs / REPORTS_PER_JOB))


class Worker:
    """One worker; ``run_once`` handles at most one job (tests call it directly)."""

    def __init__(
        self, database: Database | None = None, worker_id: str | None = None, *,
        listen: bool = True,
    ) -> None:
        self.database = database or get_database()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_seconds = settings.worker_lease_seconds
        self.device = pick_device(settings.device)
        self.stop_requested = threading.Event()
        self.listen = listen  # LISTEN for NOTIFY on PostgreSQL (the embedded worker does not)
        self.heartbeat: Heartbeat | None = None  # of the job running now
        if self.device.type == "cpu":
            # The vectorised engine's tensors are small: one thread is 1.2-9x faster than two
            # here (no cross-core handoff per step, no waiting on a busy core).
            torch.set_num_threads(settings.torch_threads or 1)
        elif settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)

    def run_forever(self) -> None:
        # torch.optim imports torch._dynamo lazily on the first optimizer (0.5 s, seconds on a
        # busy machine): pay it before announcing readiness, not in the first job's latency.
        import torch._dynamo  # noqa: F401

        # LISTEN before the first claim: a job queued in between still wakes the first wait.
        waiter = notify.create_waiter(self.database.url, listen=self.listen)
        logger.info("worker %s started on %s (%s)", self.worker_id, self.device,
                    type(waiter).__name__, extra={"worker_id": self.worker_id})
        try:
            while not self.stop_requested.is_set():
                try:
                    worked = self.run_once()
                except Exception:  # noqa: BLE001 - keep the worker alive; the job was failed
                    logger.exception("worker loop error")
                    worked = False
                if not worked and not self.stop_requested.is_set():
                    waiter.wait(settings.worker_poll_seconds)
        finally:
            waiter.close()
        logger.info("worker %s stopped", self.worker_id, extra={"worker_id": self.worker_id})

    def run_once(self) -> bool:
        """Reap lost jobs, claim one queued job and run it. Returns whether a job ran."""
        with self.database.session_scope() as session:
            reaped = queue.reap_expired(session=session)
        for job_id in reaped:
            logger.warning("job %s failed: worker lost", job_id)
        with self.database.session_scope() as session:
            job = queue.claim(
                session=session, worker_id=self.worker_id, lease_seconds=self.lease_seconds
            )
            claimed = None if job is None else ClaimedJob(
                job.id, job.dataset_id, _spec_of(job), job.kind
            )
        if claimed is None:
            return False
        heartbeat = Heartbeat(self.database, job_id=claimed.job_id, worker_id=self.worker_id,
                              lease_seconds=self.lease_seconds)
        with job_context(claimed.job_id), heartbeat:
            self.heartbeat = heartbeat
            try:
                self._run(claimed)
            finally:
                self.heartbeat = None
        return True

    def _run(self, claimed: ClaimedJob) -> None:
        logger.info("job %s claimed", claimed.job_id, extra={"worker_id": self.worker_id})
        try:
            if claimed.kind == PRIVACY_AUDIT:
                outcome = run_audit_job(self, claimed)
            else:
                outcome = self._train_and_store(claimed)
        except LeaseLost:
            logger.warning("job %s: lease lost, results discarded", claimed.job_id)
            return
        except Exception as exc:  # noqa: BLE001 - any failure ends the job as failed
            logger.error("job %s failed: %s", claimed.job_id, traceback.format_exc(limit=3))
            self._finish(claimed, FAILED, error_code="training_error", error=type(exc).__name__)
            return
        logger.info("job %s %s", claimed.job_id, outcome)

    def _on_epoch(self, claimed: ClaimedJob):  # noqa: ANN202 - closure type is EpochCallback
        every = report_interval(claimed.spec.epochs)

        def callback(epoch: int, history: list[tuple[float, float, int]]) -> bool:
            if self.heartbeat is not None and self.heartbeat.lost.is_set():
                raise LeaseLost(claimed.job_id)  # reaped meanwhile: stop touching data now
            if epoch % every and epoch != claimed.spec.epochs:
                return True  # between reports: no database round trip, no accounting
            eps_prv, eps_rdp = _epsilons(history, claimed.spec.delta)
            # Steps actually taken (the accountant's history); the planned count when non-private.
            steps = sum(n for _, _, n in history) or epoch * (
                claimed.spec.steps // claimed.spec.epochs
            )
            progress = queue.EpochProgress(
                epoch, steps, finite_or_none(eps_prv), finite_or_none(eps_rdp)
            )
            with self.database.session_scope() as session:
                owned, cancel = queue.record_epoch(
                    session=session,
                    job_id=claimed.job_id,
                    worker_id=self.worker_id,
                    progress=progress,
                    lease_seconds=self.lease_seconds,
                )
            if not owned:
                raise LeaseLost(claimed.job_id)
            return not cancel and not self.stop_requested.is_set()

        return callback

    def _train_and_store(self, claimed: ClaimedJob) -> str:
        with self.database.session_scope() as session:
            dataset = dataset_service.get(session=session, dataset_id=claimed.dataset_id)
            x_train, y_train, x_hold, y_hold = dataset_service.load_split(dataset)
        if claimed.spec.world_size > 1:  # torchrun; stops only at reports, as below
            result = train_distributed(
                x_train, y_train, claimed.spec, device=self.device,
                on_epoch=self._on_epoch(claimed), sync_every=report_interval(claimed.spec.epochs),
            )
        else:
            result = train(
                x_train, y_train, claimed.spec, device=self.device,
                on_epoch=self._on_epoch(claimed),
            )
        if result.epochs_completed < claimed.spec.epochs:
            reason = "cancelled" if not self.stop_requested.is_set() else "worker stopping"
            self._finish(claimed, CANCELLED, error_code=reason.replace(" ", "_"), error=reason)
            return CANCELLED
        eps_prv, eps_rdp = _epsilons(result.history, claimed.spec.delta)
        # Calibrated on the held-out rows, in parallel composition with training (no extra
        # spend); the held-out metrics below are of the calibrated model.
        calibration = calibrate_model(
            result.network, x_hold, y_hold,
            history=[Mechanism(*step) for step in result.history],
            delta=claimed.spec.delta, training_epsilon=eps_prv,
        )
        metrics = evaluate(
            y_hold,
            predict_proba(result.network, x_hold),
            x_raw=x_hold,
            band_thresholds=registry_service.DEFAULT_BAND_THRESHOLDS,
        )
        metrics["calibration"] = calibration.as_dict()
        sha = artifacts.save(
            result.network,
            {"kind": claimed.spec.kind, "hidden_units": claimed.spec.hidden_units,
             "scaling": SCALING, "calibration": calibration.method},
        )
        with self.database.session_scope() as session:
            job = queue.finish(
                session=session,
                job_id=claimed.job_id,
                worker_id=self.worker_id,
                status=SUCCEEDED,
                metrics=metrics,
            )
            if job is None:
                raise LeaseLost(claimed.job_id)
            model = TrainedModel(
                job_id=claimed.job_id,
                dataset_id=claimed.dataset_id,
                kind=claimed.spec.kind,
                artifact_sha256=sha,
                feature_names=list(FEATURE_NAMES),
                epsilon=finite_or_none(eps_prv),
                epsilon_rdp=finite_or_none(eps_rdp),
                delta=claimed.spec.delta,
                accountant="prv",
                metrics=metrics,
                band_thresholds=dict(registry_service.DEFAULT_BAND_THRESHOLDS),
            )
            session.add(model)
            # Active only if no model is (the zero-set-up flow); later ones wait for activation.
            registry_service.activate_if_none(session=session, model=model)
        return SUCCEEDED

    def _finish(self, claimed: ClaimedJob, status: str, **fields: str) -> None:
        with self.database.session_scope() as session:
            queue.finish(
                session=session,
                job_id=claimed.job_id,
                worker_id=self.worker_id,
                status=status,
                **fields,
            )


class EmbeddedWorker:
    """A worker thread inside the API process (the zero-set-up default)."""

    def __init__(self) -> None:
        self.worker = Worker(listen=False)  # woken by the in-process event
        self.thread = threading.Thread(target=self.worker.run_forever, name="dpcrisis-worker",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop_requested.set()
        notify.wake_workers()
        self.thread.join(timeout)
