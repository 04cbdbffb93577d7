"""In-process wake-up for the embedded worker: a submission wakes it instead of a slow poll."""

import threading

job_submitted = threading.Event()


def wake_workers() -> None:
    job_submitted.set()


def wait_for_work(timeout: float) -> None:
    """Block until a job is submitted in this process or ``timeout`` seconds pass."""
    job_submitted.wait(timeout)
    job_submitted.clear()
