"""Real ``dpcrisis worker`` (and ``serve``) processes on a test database, driven through the DB.

The worker tests are about processes, not HTTP: jobs are submitted through the service layer
(as the API would) and their state is read from the database. Each process logs JSON lines to
its own file (never a pipe a busy test could leave unread until the child blocks).
"""

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.models import Job
from app.jobs.schemas import JobCreate
from app.ledger import chain
from app.ledger.models import LedgerEntry
from bench.processes import CLI, free_port

ADMIN_KEY = "dpk_test_admin_key_for_worker_process_tests"
"""Given to ``dpcrisis serve`` (DPCRISIS_ADMIN_KEY) and sent as a bearer token, once keys exist."""

LONG_JOB = {"epochs": 1000, "batch_size": 32}
"""About 30 s of DP-SGD on 4,000 rows: surely mid-training when a test signals its worker."""
SMALL_JOB = {"epochs": 1, "batch_size": 8, "model": "mlp", "hidden_units": 64}
"""About 0.15 s of CPU on 4,000 rows (350 noisy steps of a 64-unit MLP) and one progress report:
training, which parallelises, rather than database round trips dominates."""


def process_env(database: Database, root: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database.url,
        "ARTIFACT_DIR": str(root / "artifacts"),
        "DATA_DIR": str(root / "data"),  # uploads and patient index files: never ./var/data
        "WORKER_POLL_SECONDS": "0.5",
        "WORKER_LEASE_SECONDS": "3",
        "LOG_FORMAT": "json",
        "DPCRISIS_ADMIN_KEY": ADMIN_KEY,
        **extra,
    }


class Process:
    """A ``dpcrisis`` subcommand whose stdout and stderr go to ``root/<name>.log``."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], root: Path) -> None:
        self.name = name
        self.log_path = root / f"{name}.log"
        with self.log_path.open("wb") as out:
            # Its own session, as a service would run: with the kernel's autogroup scheduling,
            # processes of one session share one CPU share, so N workers would get no more CPU
            # than one while other sessions keep this machine busy.
            self.popen = subprocess.Popen([CLI, *args], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records written so far (other lines, e.g. a crash trace, skipped)."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_logged(self, message_part: str, seconds: float = 90) -> dict[str, Any]:
        """The first record whose message contains ``message_part``; fails if the process exits."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for record in self.records():
                if message_part in record.get("message", ""):
                    return record
            assert self.popen.poll() is None, f"{self.name} exited:\n{self.tail()}"
            time.sleep(0.1)
        raise AssertionError(f"{self.name} never logged {message_part!r}:\n{self.tail()}")

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


@contextmanager
def processes() -> Iterator[Callable[..., Process]]:
    """``start(name, *args, env=..., root=...)``; every process still running is killed after."""
    started: list[Process] = []

    def start(name: str, *args: str, env: dict[str, str], root: Path) -> Process:
        process = Process(name, list(args), env, root)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def start_worker(start: Callable[..., Process], name: str, env: dict[str, str], root: Path,
                 *, ready: bool = True) -> Process:
    worker = start(name, "worker", env=env, root=root)
    if ready:
        worker.wait_logged("started")
    return worker


def start_api(start: Callable[..., Process], name: str, env: dict[str, str], root: Path
              ) -> tuple[Process, str]:
    """``dpcrisis serve --no-worker`` on a free port, once it logs that it accepts requests."""
    port = free_port()
    api = start(name, "serve", "--no-worker", "--port", str(port), env=env, root=root)
    api.wait_logged("Uvicorn running")
    return api, f"http://127.0.0.1:{port}"


def create_dataset(database: Database, n_rows: int = 4000, seed: int = 7) -> int:
    with database.session_scope() as session:
        dataset = dataset_service.create(session=session, request=DatasetCreate.model_validate(
            {"name": f"procs-{seed}", "source": {"kind": "synthetic", "n_rows": n_rows,
                                                 "seed": seed},
             "privacy_budget": {"epsilon": 100.0, "delta": 1e-6}}))
        return dataset.id


def submit(database: Database, dataset_id: int | list[int], training: dict[str, Any],
           n: int = 1, noise: float = 5.0) -> list[int]:
    """Queue ``n`` jobs (round-robin over datasets) in one transaction: one NOTIFY burst."""
    datasets = dataset_id if isinstance(dataset_id, list) else [dataset_id]
    with database.session_scope() as session:
        return [
            training_flow.submit_training(session=session, request=JobCreate.model_validate(
                {"dataset_id": datasets[i % len(datasets)], "privacy": {"noise_multiplier": noise},
                 "training": training})).id
            for i in range(n)
        ]


def jobs(database: Database, ids: list[int]) -> dict[int, Job]:
    with database.session_scope() as session:
        rows = list(session.scalars(select(Job).where(Job.id.in_(ids))))
        session.expunge_all()
    return {job.id: job for job in rows}


def wait_for(database: Database, ids: list[int], done: Callable[[Job], bool],
             seconds: float = 90, watch: list[Process] | None = None) -> dict[int, Job]:
    """Poll the jobs until ``done`` holds for each; fails if a watched process exits."""
    deadline = time.monotonic() + seconds
    while True:
        current = jobs(database, ids)
        if all(done(job) for job in current.values()):
            return current
        for process in watch or []:
            assert process.popen.poll() is None, f"{process.name} exited:\n{process.tail()}"
        if time.monotonic() > deadline:
            states = {i: (j.status, j.progress_epoch) for i, j in current.items()}
            raise AssertionError(f"jobs not done in {seconds:g} s: {states}")
        time.sleep(0.1)


def wait_ended(database: Database, ids: list[int], seconds: float = 240,
               watch: list[Process] | None = None) -> dict[int, Job]:
    """Like ``wait_for`` (all ended), polling one cheap COUNT so the test leaves CPU to workers."""
    deadline = time.monotonic() + seconds
    unfinished = select(func.count()).where(Job.id.in_(ids), Job.finished_at.is_(None))
    while True:
        with database.session_scope() as session:
            if not session.scalar(unfinished):
                return jobs(database, ids)
        for process in watch or []:
            assert process.popen.poll() is None, f"{process.name} exited:\n{process.tail()}"
        assert time.monotonic() < deadline, f"jobs not ended in {seconds:g} s"
        time.sleep(0.25)


def entry(database: Database, job_id: int) -> LedgerEntry:
    with database.session_scope() as session:
        row = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert row is not None
        session.expunge(row)
        return row


def verify_ledger(database: Database, dataset_id: int) -> dict[str, Any]:
    with database.session_scope() as session:
        return chain.verify(session=session, dataset_id=dataset_id)


def terminate(process: Process, seconds: float = 60) -> int:
    """SIGTERM, then the exit status (the worker finishes or stops its job first)."""
    process.signal(signal.SIGTERM)
    return process.popen.wait(timeout=seconds)
