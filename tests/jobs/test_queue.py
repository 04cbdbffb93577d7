"""The jobs table as a queue, on SQLite and PostgreSQL: claims, leases, cancel, lost workers."""

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app.core.database import Database
from app.core.time import utcnow
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs import queue
from app.jobs import service as job_service
from app.jobs.models import Job
from app.jobs.schemas import JobCreate
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy import accounting
from app.privacy.filter import conversion, filter_order, rdp_at
from tests.conftest import FAST_TRAINING, small_dataset
from worker.runner import Worker
from worker.tasks import report_interval


def _submit(db: Database, n_jobs: int = 1, epochs: int = 3) -> list[int]:
    with db.session_scope() as session:
        dataset = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset())
        )
        ids = []
        for _ in range(n_jobs):
            request = JobCreate.model_validate(
                {"dataset_id": dataset.id, "privacy": {"noise_multiplier": 2.0},
                 "training": {**FAST_TRAINING, "epochs": epochs}}
            )
            ids.append(training_flow.submit_training(session=session, request=request).id)
    return ids


def _job(db: Database, job_id: int) -> Job:
    with db.session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def _entry_status(db: Database, job_id: int) -> str:
    with db.session_scope() as session:
        return session.scalar(select(LedgerEntry.status).where(LedgerEntry.job_id == job_id))


def _charge(db: Database, job_id: int) -> tuple[int, int, bool]:
    """(planned steps, charged steps, released) of the job's ledger entry."""
    with db.session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None
        return entry.steps, entry.charged_steps, entry.released


def _spent(db: Database, job_id: int) -> float:
    with db.session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        dataset = dataset_service.get(session=session, dataset_id=job.dataset_id)
        return ledger_spend.dataset_spend(session=session, dataset=dataset).composed_epsilon


def test_claims_oldest_first_and_keeps_the_whole_plan_reserved(any_db: Database) -> None:
    first, second = _submit(any_db, n_jobs=2)
    with any_db.session_scope() as session:
        claimed = queue.claim(session=session, worker_id="w1", lease_seconds=60)
        assert claimed is not None and claimed.id == first
    assert _job(any_db, first).status == "running"
    # Steps are committed epoch by epoch; until then the whole plan stays reserved, and only
    # the worker's own stop at an epoch boundary can release any of it.
    assert _entry_status(any_db, first) == "reserved"
    assert _entry_status(any_db, second) == "reserved"


def test_concurrent_claims_never_share_a_job(any_db: Database) -> None:
    ids = _submit(any_db, n_jobs=8)
    claimed: list[int] = []
    lock = threading.Lock()

    def claim_all(worker_id: str) -> None:
        while True:
            with any_db.session_scope() as session:
                job = queue.claim(session=session, worker_id=worker_id, lease_seconds=60)
                if job is None:
                    return
                with lock:
                    claimed.append(job.id)

    threads = [threading.Thread(target=claim_all, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == ids


def test_lost_worker_fails_the_job_and_keeps_the_charge(
    any_db: Database, artifact_dir: Path
) -> None:
    (job_id,) = _submit(any_db)
    with any_db.session_scope() as session:
        queue.claim(session=session, worker_id="dead", lease_seconds=60)
        session.execute(
            update(Job).where(Job.id == job_id).values(lease_until=utcnow() - timedelta(seconds=1))
        )
    Worker(database=any_db, worker_id="alive").run_once()
    job = _job(any_db, job_id)
    assert job.status == "failed" and job.error_code == "worker_lost"
    assert _entry_status(any_db, job_id) == "committed"
    planned, charged, released = _charge(any_db, job_id)
    assert charged == planned and not released  # how far it got is unknown: charged in full


def test_worker_runs_a_job_to_a_model(any_db: Database, artifact_dir: Path) -> None:
    (job_id,) = _submit(any_db)
    assert Worker(database=any_db).run_once() is True
    job = _job(any_db, job_id)
    assert job.status == "succeeded" and job.metrics is not None
    assert len(list(artifact_dir.glob("*.pt"))) == 1
    assert Worker(database=any_db).run_once() is False


def _before_each_epoch_record(
    monkeypatch: pytest.MonkeyPatch, action: Callable[[int], None]
) -> None:
    """Run ``action(epoch)`` just before the worker records each epoch's progress."""
    original = queue.record_epoch

    def wrapped(**kwargs: Any) -> Any:
        action(kwargs["progress"].epoch)
        return original(**kwargs)

    monkeypatch.setattr(queue, "record_epoch", wrapped)


def test_cancel_while_running_stops_and_keeps_the_charge(
    db: Database, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = _submit(db, epochs=50)
    first_report = report_interval(50)  # progress is reported (and cancel seen) every 3 epochs
    assert first_report == 3

    def cancel_at_first_report(epoch: int) -> None:
        if epoch == first_report:
            with db.session_scope() as session:
                job_service.cancel(session=session, job=session.get(Job, job_id))

    _before_each_epoch_record(monkeypatch, cancel_at_first_report)
    Worker(database=db).run_once()
    job = _job(db, job_id)
    assert job.status == "cancelled" and job.progress_epoch == first_report
    assert _entry_status(db, job_id) == "committed"
    # The epochs that ran stay charged; the 47 that never ran go back to the budget.
    planned, charged, released = _charge(db, job_id)
    assert released and charged == planned // 50 * first_report
    mechanism = accounting.Mechanism(2.0, job.sample_rate, charged)
    order = filter_order(10.0, 1e-5)  # SMALL_DATASET's budget
    # One release: the filter's figure at its order, or its own tight epsilon if smaller.
    assert _spent(db, job_id) == pytest.approx(min(
        rdp_at([mechanism], order) + conversion(order, 1e-5),
        accounting.PRVAccountant().epsilon([mechanism], 1e-5)), rel=1e-12)
    assert job.epsilon_spent is not None and job.epsilon_spent > 0


def test_a_failed_run_is_charged_in_full(
    db: Database, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = _submit(db, epochs=5)

    def fail_in_second_epoch(epoch: int) -> None:
        if epoch == 2:
            raise RuntimeError("disk full")

    _before_each_epoch_record(monkeypatch, fail_in_second_epoch)
    Worker(database=db).run_once()
    job = _job(db, job_id)
    assert job.status == "failed" and job.error_code == "training_error"
    planned, charged, released = _charge(db, job_id)
    assert charged == planned and not released


def test_lease_lost_mid_training_discards_results(
    db: Database, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = _submit(db, epochs=5)

    def reaped_meanwhile(_epoch: int) -> None:
        with db.session_scope() as session:
            session.execute(
                update(Job).where(Job.id == job_id)
                .values(lease_until=utcnow() - timedelta(seconds=1))
            )
            queue.reap_expired(session=session)

    _before_each_epoch_record(monkeypatch, reaped_meanwhile)
    Worker(database=db, worker_id="slow").run_once()
    job = _job(db, job_id)
    assert job.status == "failed" and job.error_code == "worker_lost"
    assert list(artifact_dir.glob("*.pt")) == []
    planned, charged, released = _charge(db, job_id)
    assert charged == planned and not released
