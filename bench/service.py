"""Run a real ``dpcrisis`` process on a temporary SQLite database, for the HTTP benchmarks."""

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench import processes

CLI = str(Path(sys.executable).parent / "dpcrisis")
ADMIN_KEY = "dpk_bench-admin-key-not-for-production-0123"
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
"""The served process creates ``ADMIN_KEY`` from ``DPCRISIS_ADMIN_KEY``; benches send ``AUTH``."""


def run_cli(root: Path, name: str, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.Popen[bytes]:
    """``dpcrisis <name> <args>`` on ``root``'s database and artifacts, logging to root/name.log;
    the leader of its own process group (``processes.stop`` ends the group)."""
    full_env = {**os.environ, "DATABASE_URL": f"sqlite:///{root / 'bench.db'}",
                "ARTIFACT_DIR": str(root / "artifacts"), "DPCRISIS_ADMIN_KEY": ADMIN_KEY,
                **(env or {})}
    with (root / f"{name}.log").open("wb") as out:
        return subprocess.Popen([CLI, name, *args], env=full_env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def start_server(root: Path, *args: str, env: dict[str, str] | None = None,
                 seconds: float = 120) -> tuple[subprocess.Popen[bytes], str]:
    """``dpcrisis serve`` on a free port, returned once /readyz answers 200."""
    port = processes.free_port()
    process = run_cli(root, "serve", "--port", str(port), *args, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.1)
    processes.stop(process)
    tail = (root / "serve.log").read_text(errors="replace")[-2000:]
    raise SystemExit(f"server did not become ready in {seconds:g} s:\n{tail}")


def api_client(base: str, timeout: float) -> httpx.Client:
    """An HTTP client for ``base`` that sends the admin key."""
    return httpx.Client(base_url=base, timeout=timeout, headers=AUTH)
