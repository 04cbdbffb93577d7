"""Start a real `dpcrisis` process on a temporary SQLite database, for the end-to-end tests."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

CLI = str(Path(sys.executable).parent / "dpcrisis")
ADMIN_KEY = "dpk_e2e-admin-key-for-tests-only-0123456789"
"""Created by the served process from ``DPCRISIS_ADMIN_KEY`` (the automated set-up path)."""


_handed_out: set[int] = set()
"""Ports this test process has named for a server: never named twice."""


def _free_port() -> int:
    """A loopback port no earlier call in this test process returned. The kernel may hand a
    probed port out again once the probe closes, and servers started together (the federation's
    clinics) bind only after a slow start: two of them named one port left the first answering
    /readyz for both while the second was still importing, and the test spoke to the wrong
    clinic (a CI run's ``key-name-taken`` 409)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def service_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'dpcrisis.db'}",
        "ARTIFACT_DIR": str(tmp_path / "var" / "artifacts"),
        "DATA_DIR": str(tmp_path / "var" / "data"),  # uploads, never into the working tree
        "WORKER_POLL_SECONDS": "0.2",
        "DPCRISIS_ADMIN_KEY": ADMIN_KEY,
    }


def api_client(base: str, key: str = ADMIN_KEY, timeout: float = 30) -> httpx.Client:
    """An HTTP client for ``base`` that sends ``key`` as its Bearer token."""
    return httpx.Client(base_url=base, timeout=timeout,
                        headers={"Authorization": f"Bearer {key}"})


_server_logs: dict[int, Path] = {}


def start_server(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``dpcrisis serve`` logging to ``tmp_path/serve.log``: a file, not a pipe nobody reads,
    which would stall the server once its JSON access lines filled the pipe's buffer."""
    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [CLI, "serve", "--port", str(port), *extra],
            env=service_env(tmp_path), stdout=out, stderr=subprocess.STDOUT, text=True,
        )
    _server_logs[process.pid] = log
    return process, f"http://127.0.0.1:{port}"


def server_log(process: subprocess.Popen[str]) -> str:
    log = _server_logs.get(process.pid)
    return log.read_text(errors="replace")[-4000:] if log is not None else ""


def wait_ready(process: subprocess.Popen[str], base: str, seconds: float = 60) -> None:
    """Until /readyz answers 200; fails the test if the process exits or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server exited: {server_log(process)}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"server did not become ready in {seconds:g} s")


@contextmanager
def served(tmp_path: Path) -> Iterator[str]:
    """A ready ``dpcrisis serve`` on ``tmp_path``'s database for the ``with`` block: its URL."""
    process, base = start_server(tmp_path)
    try:
        wait_ready(process, base)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
