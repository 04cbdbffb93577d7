"""Worker faults with real processes, on SQLite and PostgreSQL.

A SIGKILLed worker's job is failed within its lease (by the API's reaper: the next worker is
still starting) with its charge kept, and the next job runs; SIGTERM stops a worker cleanly at an
epoch boundary; two workers race for one job and one trains it, through an API restart.
Leases are 3 s here (WORKER_LEASE_SECONDS), renewed by the heartbeat thread every second.
Process start-up (torch) dominates these tests' time, so each starts as few as it can.
"""

import signal
import time
from pathlib import Path

import httpx
import pytest

from app.core.database import Database
from app.jobs.models import Job
from tests.e2e.workers import (
    ADMIN_KEY,
    LONG_JOB,
    SMALL_JOB,
    create_dataset,
    entry,
    jobs,
    process_env,
    processes,
    start_api,
    start_worker,
    submit,
    terminate,
    verify_ledger,
    wait_for,
)

pytestmark = pytest.mark.slow

LEASE = 3.0
PATIENT_73 = {"age": 73, "phq9": 19, "gaf": 41, "num_sessions": 37, "substance_use": 1,
              "prior_crisis": 0}
REAP_SLACK = 12.0
"""Lease plus one reaper sweep is 4 s; the rest tolerates a loaded 2-core machine."""


def _mid_training(job: Job) -> bool:
    return job.status == "running" and job.progress_epoch >= 1


def test_sigkill_fails_the_job_within_its_lease_and_keeps_the_charge(
    any_db: Database, tmp_path: Path
) -> None:
    dataset_id = create_dataset(any_db)
    (lost,) = submit(any_db, dataset_id, LONG_JOB)
    env = process_env(any_db, tmp_path)
    with processes() as start:
        doomed = start_worker(start, "doomed", env, tmp_path, ready=False)
        start_api(start, "api", env, tmp_path)  # the reaper; it trains nothing (--no-worker)
        wait_for(any_db, [lost], _mid_training, watch=[doomed])
        (following,) = submit(any_db, dataset_id, SMALL_JOB)
        doomed.signal(signal.SIGKILL)
        killed_at = time.monotonic()
        # Its start-up (importing torch) outlasts the lease: the API's reaper fails the job.
        survivor = start_worker(start, "survivor", env, tmp_path, ready=False)
        failed = wait_for(any_db, [lost], lambda j: j.status != "running",
                          seconds=LEASE + REAP_SLACK)[lost]
        assert failed.status == "failed" and failed.error_code == "worker_lost"
        assert time.monotonic() - killed_at <= LEASE + REAP_SLACK

        # How far the killed run got is unknown: the whole plan stays charged, nothing released.
        charge = entry(any_db, lost)
        assert charge.status == "committed" and not charge.released
        assert charge.charged_steps == charge.steps

        done = wait_for(any_db, [lost, following], lambda j: j.status != "queued"
                        and j.status != "running", watch=[survivor])
        assert done[following].status == "succeeded"
        assert done[lost].status == "failed"  # never picked up again
        assert terminate(survivor) == 0
    assert verify_ledger(any_db, dataset_id)["valid"]


def test_sigterm_stops_at_an_epoch_boundary_and_exits_0(
    any_db: Database, tmp_path: Path
) -> None:
    dataset_id = create_dataset(any_db)
    running, waiting = submit(any_db, dataset_id, LONG_JOB, n=2)
    with processes() as start:
        worker = start_worker(start, "worker", process_env(any_db, tmp_path), tmp_path,
                              ready=False)
        wait_for(any_db, [running], _mid_training, watch=[worker])
        assert terminate(worker) == 0
    stopped = wait_for(any_db, [running, waiting], lambda _j: True)
    job = stopped[running]
    assert job.status == "cancelled" and job.error_code == "worker_stopping"
    assert stopped[waiting].status == "queued"  # a stopping worker takes no new job
    # The epochs that ran stay charged; the unrun remainder went back to the budget.
    charge = entry(any_db, running)
    assert charge.released and 0 < charge.charged_steps < charge.steps
    assert charge.charged_steps == charge.steps // LONG_JOB["epochs"] * job.progress_epoch
    assert verify_ledger(any_db, dataset_id)["valid"]


def test_two_workers_race_for_one_job_and_an_api_restart_loses_nothing(
    db: Database, tmp_path: Path
) -> None:
    env = process_env(db, tmp_path)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with processes() as start:
        workers = [start_worker(start, f"w{i}", env, tmp_path, ready=False) for i in range(2)]
        api, base = start_api(start, "api", env, tmp_path)
        for worker in workers:
            worker.wait_logged("started")
        dataset = httpx.post(f"{base}/v1/datasets", headers=headers, timeout=30, json={
            "name": "restart", "source": {"kind": "synthetic", "n_rows": 4000, "seed": 5},
            "privacy_budget": {"epsilon": 100, "delta": 1e-6}})
        assert dataset.status_code == 201, dataset.text
        dataset_id = dataset.json()["id"]
        job = httpx.post(f"{base}/v1/jobs", headers=headers, timeout=30, json={
            "dataset_id": dataset_id, "privacy": {"noise_multiplier": 5.0},
            "training": {"epochs": 400, "batch_size": 32}})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        wait_for(db, [job_id], _mid_training, watch=workers)

        api.signal(signal.SIGKILL)
        api.popen.wait()
        assert jobs(db, [job_id])[job_id].status == "running"  # the API died mid-job
        api_again, base = start_api(start, "api-again", env, tmp_path)
        done = wait_for(db, [job_id], lambda j: j.status == "succeeded", seconds=120,
                        watch=workers)[job_id]
        served = httpx.get(f"{base}/v1/jobs/{job_id}", headers=headers, timeout=30).json()
        assert served["status"] == "succeeded" and served["model_id"] is not None
        verified = httpx.get(f"{base}/v1/datasets/{dataset_id}/ledger/verify",
                             headers=headers, timeout=30).json()
        assert verified["valid"], verified
        # The restarted API serves the model; the patient it scores reaches no log line.
        scored = httpx.post(f"{base}/v1/risk", headers={**headers, "X-Request-ID": "rq-77"},
                            timeout=30, json={"features": PATIENT_73})
        assert scored.status_code == 200 and scored.headers["X-Request-ID"] == "rq-77"
        for worker in workers:
            assert terminate(worker) == 0
    # Both workers were idle when the job was queued; exactly one claimed and trained it.
    claims = [r for w in workers for r in w.records()
              if r.get("job_id") == job_id and "claimed" in r["message"]]
    assert len(claims) == 1 and claims[0]["worker_id"] == done.worker_id, claims
    assert entry(db, job_id).charged_steps == entry(db, job_id).steps
    # The scoring request left one access line (JSON, with its request id) and no features.
    access = [r for r in api_again.records() if r.get("request_id") == "rq-77"]
    assert [r["message"].split(" - ", 1)[1] for r in access] == ['"POST /v1/risk HTTP/1.1" 200']
    api_log = api_again.log_path.read_text()
    assert "features" not in api_log and "phq9" not in api_log and "num_sessions" not in api_log
