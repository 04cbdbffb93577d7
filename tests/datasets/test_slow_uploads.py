"""Slow uploads cannot take the service down: no database connection is held while a body
arrives, a body must keep a minimum pace (408), and one upload per dataset holds its claim
(409 for the others).

Before: 16 authenticated uploads sending 1 byte/s exhausted the database pool (each held its
route's session while waiting for the body); clinicians' requests timed out, and at 45 even
``/healthz`` did. Checked here on a real uvicorn server with raw sockets trickling bytes.
"""

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.database import Database
from app.core.settings import settings
from app.main import create_app
from tests.conftest import bearer, new_key
from tests.datasets.test_upload_api import SCHEMA
from tests.threaded_server import threaded_server

TRICKLERS = 24  # more than the pool's 5 + 10 connections


@pytest.fixture
def server(db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    monkeypatch.setattr(settings, "upload_grace_seconds", 1.0)
    monkeypatch.setattr(settings, "upload_min_bytes_per_second", 2000.0)
    with threaded_server(db, create_app(embedded_worker=False)) as address:
        yield address


def _trickle(host: str, key: str, dataset_id: int, answers: list[bytes],
             stop: threading.Event) -> None:
    """Send an upload's headers, then one byte every 0.3 s until answered or told to stop."""
    address, port = host.split(":")
    with socket.create_connection((address, int(port)), timeout=30) as conn:
        conn.sendall((f"PUT /v1/datasets/{dataset_id}/data HTTP/1.1\r\nHost: {host}\r\n"
                      f"Authorization: Bearer {key}\r\nContent-Type: text/csv\r\n"
                      "Content-Length: 1000000\r\n\r\n").encode())
        conn.settimeout(0.3)
        answer = b""
        while not stop.is_set() and not answer:
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                try:
                    conn.sendall(b"p")
                except OSError:
                    break
        answers.append(answer)


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_trickling_uploads_leave_the_service_answering(server: str, db: Database) -> None:
    admin = bearer(new_key("admin"))
    base = f"http://{server}"
    ids = []
    for i in range(6):
        created = httpx.post(f"{base}/v1/datasets", headers=admin, timeout=10, json={
            "name": f"clinic-{i}", "source": {"kind": "upload"}, "schema": SCHEMA,
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    key = admin["Authorization"].split(" ", 1)[1]
    answers: list[bytes] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_trickle, args=(server, key, ids[i % len(ids)],
                                                       answers, stop))
               for i in range(TRICKLERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)  # every trickler is connected and sending
        for _ in range(5):
            began = time.monotonic()
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
            listed = httpx.get(f"{base}/v1/datasets/{ids[0]}", headers=admin, timeout=5)
            assert listed.status_code == 200, listed.text
            assert time.monotonic() - began < 2.0
            time.sleep(0.2)
        deadline = time.monotonic() + 15  # grace 1 s, then 2000 bytes/s: all cut by then
        while len(answers) < TRICKLERS and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    statuses = sorted(int(a.split(b" ", 2)[1]) for a in answers if a)
    assert len(statuses) == TRICKLERS, answers
    # One upload per dataset claimed it and was cut for its pace; everyone else was refused
    # at once.
    assert statuses.count(408) == len(ids), statuses
    assert set(statuses) <= {408, 409}, statuses
    states = {httpx.get(f"{base}/v1/datasets/{i}", headers=admin, timeout=5).json()["state"]
              for i in ids}
    assert states == {"awaiting_data"}  # every claim was given back
    assert not [p for p in (settings.data_dir).iterdir()]  # no spool left behind
