"""``dpcrisis`` processes on loopback, for the benches that run several services at once
(``bench/federated.py``) and for the end-to-end tests.

Each process logs to a file in its own folder (a pipe nobody reads would stall a server once
its access lines filled the pipe's buffer), listens on a port no earlier call in this process
named, and leads a process group of its own, so ``stop`` ends it with anything it started.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

CLI = str(Path(sys.executable).parent / "dpcrisis")
ADMIN_KEY = "dpk_e2e-admin-key-for-tests-only-0123456789"
"""Created by the served process from ``DPCRISIS_ADMIN_KEY`` (the automated set-up path)."""

READY_SECONDS = 60.0
"""How long ``wait_ready`` waits for /readyz by default: one service on a loaded machine."""


class NotReady(RuntimeError):
    """A served process exited, or did not answer /readyz in time."""


_handed_out: set[int] = set()
"""Ports this process has named for a server: never named twice."""


def free_port() -> int:
    """A loopback port no earlier call in this process returned. The kernel may hand a probed
    port out again once the probe closes, and servers started together (the federation's
    clinics) bind only after a slow start: two of them named one port would leave the first
    answering /readyz for both while the second was still importing."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def service_env(root: Path, **overrides: str) -> dict[str, str]:
    """The environment of a service whose database, artifacts and uploads live under ``root``;
    ``overrides`` set other settings (their names upper-cased)."""
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{root / 'var' / 'dpcrisis.db'}",
        "ARTIFACT_DIR": str(root / "var" / "artifacts"),
        "DATA_DIR": str(root / "var" / "data"),  # uploads, never into the working tree
        "WORKER_POLL_SECONDS": "0.2",
        "DPCRISIS_ADMIN_KEY": ADMIN_KEY,
        **{name.upper(): value for name, value in overrides.items()},
    }


def api_client(base: str, key: str = ADMIN_KEY, timeout: float = 30) -> httpx.Client:
    """An HTTP client for ``base`` that sends ``key`` as its Bearer token."""
    return httpx.Client(base_url=base, timeout=timeout,
                        headers={"Authorization": f"Bearer {key}"})


_logs: dict[int, Path] = {}


def spawn(args: list[str], *, env: dict[str, str], log: Path,
          append: bool = False) -> subprocess.Popen[str]:
    """``dpcrisis <args>`` leading a new process group, its output in ``log``."""
    with log.open("a" if append else "w") as out:
        process = subprocess.Popen([CLI, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
    _logs[process.pid] = log
    return process


def start_server(root: Path, *extra: str, **settings: str) -> tuple[subprocess.Popen[str], str]:
    """``dpcrisis serve`` on ``root``'s database, logging to ``root/serve.log`` (appended to:
    a service started again on its folder keeps its first run's lines); not yet ready."""
    port = free_port()
    process = spawn(["serve", "--port", str(port), *extra], env=service_env(root, **settings),
                    log=root / "serve.log", append=True)
    return process, f"http://127.0.0.1:{port}"


def server_log(process: subprocess.Popen[str]) -> str:
    """The last lines the process wrote, for a failure's message."""
    log = _logs.get(process.pid)
    return log.read_text(errors="replace")[-4000:] if log is not None else ""


def wait_ready(process: subprocess.Popen[str], base: str,
               seconds: float = READY_SECONDS) -> None:
    """Until /readyz answers 200.

    Raises:
        NotReady: the process exited, or ``seconds`` passed (the process is left running: the
            caller that started it stops it).
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NotReady(f"server exited: {server_log(process)}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise NotReady(f"server did not become ready in {seconds:g} s: {server_log(process)}")


def stop(process: subprocess.Popen[str] | subprocess.Popen[bytes],
         seconds: float = 30) -> None:
    """SIGTERM to the process's group (a graceful stop), SIGKILL to it after ``seconds``; the
    group goes whole, with anything the process started. Safe on a process already gone."""
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process, signal.SIGKILL)  # what is left of the group
    process.wait()


def _signal_group(process: subprocess.Popen[str] | subprocess.Popen[bytes],
                  sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        if process.poll() is None:  # not a group leader (started elsewhere): the process alone
            process.send_signal(sig)


@contextmanager
def served(root: Path) -> Iterator[str]:
    """A ready ``dpcrisis serve`` on ``root``'s database for the ``with`` block: its URL."""
    process, base = start_server(root)
    try:
        wait_ready(process, base)
        yield base
    finally:
        stop(process)
