"""The jobs table as a queue: claim in one statement, heartbeat a lease, finish, reap.

PostgreSQL: ``UPDATE job ... WHERE id = (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id`` lets many workers claim concurrently without blocking each other. SQLite drops
the FOR UPDATE clause and serialises the single UPDATE statement itself.
"""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.database import affected_rows
from app.core.time import utcnow
from app.jobs import kinds
from app.jobs.models import (
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Job,
    JobStatus,
)
from app.ledger import service as ledger_service
from app.ledger.release import Scope


@dataclass(frozen=True)
class EpochProgress:
    epoch: int
    steps: int  # noisy steps taken so far (from the accountant's history)
    epsilon_prv: float | None
    epsilon_rdp: float | None


def claim(*, session: Session, worker_id: str, lease_seconds: float) -> Job | None:
    """Take the oldest queued job, or None.

    Its whole plan stays reserved: once running, nothing but the worker's own stop at an epoch
    boundary can give any of it back (``ledger_service.settle``).
    """
    now = utcnow()
    next_id = (
        select(Job.id)
        .where(Job.status == QUEUED)
        .order_by(Job.id)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    stmt = (
        update(Job)
        .where(Job.id == next_id, Job.status == QUEUED)
        .values(
            status=RUNNING,
            worker_id=worker_id,
            started_at=now,
            lease_until=now + timedelta(seconds=lease_seconds),
        )
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    )
    job_id = session.execute(stmt).scalar_one_or_none()
    if job_id is None:
        return None
    return session.get(Job, job_id, populate_existing=True)


def _owned(job_id: int, worker_id: str) -> Any:
    return (Job.id == job_id) & (Job.worker_id == worker_id) & (Job.status == RUNNING)


def record_epoch(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    progress: EpochProgress,
    lease_seconds: float,
    ahead: bool = False,
) -> tuple[bool, bool]:
    """Store an epoch's progress, commit its steps to the ledger and renew the lease.

    ``ahead``: the steps are committed before they run (a federation's round): a cancel
    already asked for commits nothing, so the round it stops is not charged.

    Returns:
        (still_owned, cancel_requested). ``still_owned`` is False when the lease was lost.
    """
    job = session.scalar(select(Job).where(_owned(job_id, worker_id)).with_for_update())
    if job is None:
        return False, False
    if ahead and job.cancel_requested:
        return True, True
    job.progress_epoch = progress.epoch
    job.epsilon_spent = progress.epsilon_prv
    job.epsilon_per_epoch = [
        *job.epsilon_per_epoch,
        {"epoch": progress.epoch, "prv": progress.epsilon_prv, "rdp": progress.epsilon_rdp},
    ]
    job.lease_until = utcnow() + timedelta(seconds=lease_seconds)
    ledger_service.commit_steps(session=session, scope=Scope.job(job_id), steps=progress.steps)
    return True, job.cancel_requested


def cancel_requested(*, session: Session, job_id: int) -> bool:
    """Whether the job's cancel was asked (a part that waits on others reads it between
    reports); True for a job that is gone."""
    asked = session.scalar(select(Job.cancel_requested).where(Job.id == job_id))
    return asked is None or bool(asked)


def heartbeat(*, session: Session, job_id: int, worker_id: str, lease_seconds: float) -> bool:
    result = session.execute(
        update(Job)
        .where(_owned(job_id, worker_id))
        .values(lease_until=utcnow() + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    return bool(affected_rows(result))


def finish(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    status: str,
    metrics: dict[str, Any] | None = None,
    error_code: str | None = None,
    error: str | None = None,
) -> Job | None:
    """End a job this worker owns and settle its ledger entry (see ``ledger_service.settle``).

    Raises:
        pydantic.ValidationError: ``metrics`` has a key its kind's model (``app.jobs.kinds``)
            does not declare: a figure without a release-inventory entry is never stored.
    """
    assert status in (SUCCEEDED, FAILED, CANCELLED)
    job = session.scalar(select(Job).where(_owned(job_id, worker_id)).with_for_update())
    if job is None:
        return None
    if metrics is not None:
        kinds.check(job.kind, metrics)  # a key nobody classified is never stored
    job.status = JobStatus(status)
    job.finished_at = utcnow()
    job.lease_until = None
    job.metrics = metrics
    job.error_code = error_code
    job.error = error
    ledger_service.settle(session=session, scope=Scope.job(job_id),
                          stopped_early=status == CANCELLED,
                          charged_ahead=_charged_ahead(job.kind))
    return job


def _charged_ahead(word: str) -> bool:
    """Whether a job of this kind committed its spend as it went (false for a kind no module
    declares any longer: its job is failed and settled as any other)."""
    kind = kinds.find(word)
    return kind is not None and kind.charged_ahead


def reap_expired(*, session: Session) -> list[int]:
    """Fail running jobs whose worker stopped heart-beating; their spend is kept.

    Every idle worker and every API process calls this often: a plain read first, so that on
    SQLite the common case (nothing expired) takes no write lock.
    """
    now = utcnow()
    expired = select(Job.id).where(Job.status == RUNNING, Job.lease_until < now).limit(1)
    if session.scalar(expired) is None:
        return []
    stmt = (
        update(Job)
        .where(Job.status == RUNNING, Job.lease_until < now)
        .values(
            status=FAILED,
            finished_at=now,
            error_code="worker_lost",
            error="the worker stopped renewing its lease; the privacy charge is kept",
        )
        .returning(Job.id, Job.kind)
        .execution_options(synchronize_session=False)
    )
    reaped = [(row[0], row[1]) for row in session.execute(stmt).all()]
    for job_id, kind in reaped:  # a federated part is charged before each round it begins
        ledger_service.settle(session=session, scope=Scope.job(job_id), stopped_early=False,
                              charged_ahead=_charged_ahead(kind))
    return [job_id for job_id, _ in reaped]
