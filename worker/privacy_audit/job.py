"""A privacy-audit job on the shared queue: run the audit, store it, raise the alarm.

The worker claims audit jobs like training jobs and hands them here. An audit touches only
public synthetic data (the API refuses others, and this checks again), so it never writes to
the ledger. If the audited lower bound exceeds the accounted epsilon, the implementation leaks
more than the accounting claims: the job fails with ``privacy_bug_detected`` and an ERROR log.
"""

import logging
import threading
import traceback
from dataclasses import replace
from typing import Any, Protocol

import torch
from sqlalchemy import select

from app.core.database import Database
from app.datasets import parts as dataset_parts
from app.datasets import service as dataset_service
from app.jobs import queue
from app.jobs.models import CANCELLED, FAILED, SUCCEEDED, Job
from app.jobs.schemas import TaskPayload
from app.privacy_audit.schemas import AuditCreate
from app.privacy_audit.service import PRIVACY_BUG
from worker.handlers import ClaimedJob
from worker.privacy_audit.audit import AuditPlan, run
from worker.privacy_audit.membership import Checkpoint
from worker.tasks import spec_of
from worker.training import TrainingSpec

logger = logging.getLogger("dpcrisis.worker")


class AuditWorker(Protocol):
    """What an audit needs of ``worker.runner.Worker``."""

    database: Database
    worker_id: str
    lease_seconds: float
    device: torch.device
    stop_requested: threading.Event


class AuditPayload(TaskPayload):
    """The ``privacy_audit`` kind's payload: the audited job's DP-SGD spec (its exact
    settings, copied onto the audit's row) and the audit as requested."""

    spec: TrainingSpec
    request: AuditCreate


def parse_audit(job: Job) -> AuditPayload:
    """An audit job's payload: its target's spec and its stored request."""
    return AuditPayload(spec=spec_of(job), request=AuditCreate.model_validate(job.payload))


class _Stop(Exception):
    """The audit stops between two trainings: cancelled, worker stopping, or lease lost."""

    def __init__(self, status: str | None, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _checkpoint(worker: AuditWorker, job_id: int) -> Checkpoint:
    """Between trainings: renew the lease, and stop on cancel, shutdown or a lost lease."""

    def check(phase: str) -> None:
        with worker.database.session_scope() as session:
            owned = queue.heartbeat(session=session, job_id=job_id, worker_id=worker.worker_id,
                                    lease_seconds=worker.lease_seconds)
            cancel = session.scalar(select(Job.cancel_requested).where(Job.id == job_id))
        if not owned:
            raise _Stop(None, "lease lost")
        if cancel:
            raise _Stop(CANCELLED, "cancelled")
        if worker.stop_requested.is_set():
            raise _Stop(CANCELLED, "worker stopping")
        logger.debug("job %s audit phase: %s", job_id, phase)

    return check


def _finish(worker: AuditWorker, job_id: int, status: str, **fields: Any) -> bool:
    with worker.database.session_scope() as session:
        job = queue.finish(session=session, job_id=job_id, worker_id=worker.worker_id,
                           status=status, **fields)
    return job is not None


def run_audit_job(worker: AuditWorker, claimed: ClaimedJob[AuditPayload]) -> str:
    """Run one claimed audit job to its end; returns the outcome for the worker's log."""
    job_id, request = claimed.job_id, claimed.payload.request
    try:
        with worker.database.session_scope() as session:
            dataset = dataset_service.get(session=session, dataset_id=claimed.dataset_id)
            if not dataset.public or dataset.source_kind != "synthetic":
                raise PermissionError(f"dataset {dataset.id} is not public synthetic data")
            train_part = dataset_parts.load_parts(dataset).train
            x_train, y_train = train_part.x, train_part.y
        plan = AuditPlan(
            spec=replace(claimed.payload.spec, world_size=1), canaries=request.canaries,
            shadow_models=request.shadow_models, seed=request.seed,
            confidence=request.confidence,
        )
        result = run(plan, x_train, y_train, device=worker.device,
                     checkpoint=_checkpoint(worker, job_id))
    except _Stop as stop:
        if stop.status is None:
            logger.warning("job %s: lease lost, audit discarded", job_id)
            return "lease lost"
        _finish(worker, job_id, stop.status, error_code=stop.reason.replace(" ", "_"),
                error=stop.reason)
        return stop.status
    except Exception as exc:  # noqa: BLE001 - any failure ends the audit job as failed
        logger.error("job %s audit failed: %s", job_id, traceback.format_exc(limit=3))
        _finish(worker, job_id, FAILED, error_code="audit_error", error=type(exc).__name__)
        return FAILED
    result["audited_job_id"] = request.job_id
    if result["alarm"]:
        message = (
            f"privacy bug: audited epsilon lower bound {result['audited_epsilon']:.4g} exceeds "
            f"the accounted epsilon {result['accounted_epsilon']:.4g} (delta {plan.spec.delta:g},"
            f" {result['confidence']:.0%} confidence): the training leaks more than it claims"
        )
        logger.error("job %s: %s", job_id, message)
        _finish(worker, job_id, FAILED, metrics=result, error_code=PRIVACY_BUG, error=message)
        return FAILED
    if not _finish(worker, job_id, SUCCEEDED, metrics=result):
        logger.warning("job %s: lease lost, audit discarded", job_id)
        return "lease lost"
    return SUCCEEDED
