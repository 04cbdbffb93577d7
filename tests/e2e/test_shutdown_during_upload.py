"""SIGTERM stops ``dpcrisis serve`` promptly even while an upload's body is still arriving:
the server waits ``SHUTDOWN_GRACE_SECONDS`` for requests in flight, then cuts them; the cut
upload keeps nothing and its dataset awaits its data again at the next start.

Before: a spinning ingest thread kept SIGTERM from stopping the server within 15 s.
"""

import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from bench.processes import ADMIN_KEY, api_client, start_server, wait_ready
from tests.datasets.test_upload_api import SCHEMA


@pytest.mark.slow
def test_sigterm_ends_a_trickling_upload_and_the_server(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHUTDOWN_GRACE_SECONDS", "2")
    monkeypatch.setenv("UPLOAD_GRACE_SECONDS", "600")  # the pace never cuts it first
    process, base = start_server(tmp_path, "--no-worker")
    stop = threading.Event()
    try:
        wait_ready(process, base)
        with api_client(base) as http:
            created = http.post("/v1/datasets", json={
                "name": "clinic", "source": {"kind": "upload"}, "schema": SCHEMA,
                "privacy_budget": {"epsilon": 3, "delta": 1e-5}})
            assert created.status_code == 201, created.text
        host, port = base.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)))
        conn.sendall((f"PUT /v1/datasets/{created.json()['id']}/data HTTP/1.1\r\n"
                      f"Host: {host}\r\nAuthorization: Bearer {ADMIN_KEY}\r\n"
                      "Content-Type: text/csv\r\nContent-Length: 1000000\r\n\r\n"
                      "patient_id,phq9,sex,prior_crisis,crisis_30d\n").encode())

        def trickle() -> None:
            while not stop.is_set():
                try:
                    conn.sendall(b"p1,3,female,0,0\n")
                except OSError:
                    return
                time.sleep(0.2)

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(1.0)  # the upload is in flight, its ingest thread waiting on the body
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        assert time.monotonic() - began < 10
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
            process.wait()
    data = tmp_path / "var" / "data"
    assert not [p for p in data.iterdir() if not p.name.startswith(".")] if data.exists() else True
