"""In-process wake-up for the embedded worker: a submission wakes it instead of a slow poll."""

import threading

from app.core.settings import settings

job_submitted = threading.Event()


def wake_workers() -> None:
    """Wake the embedded worker now (a new job, or a stop request)."""
    job_submitted.set()


def announce_job() -> None:
    """A job was queued: wake the worker unless ``WORKER_WAKE`` is off (then it polls)."""
    if settings.worker_wake:
        wake_workers()


def wait_for_work(timeout: float) -> None:
    """Block until a job is submitted in this process or ``timeout`` seconds pass."""
    job_submitted.wait(timeout)
    job_submitted.clear()
