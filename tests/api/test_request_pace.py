"""Every request body has a pace and a time limit, as a table upload has: a JSON body that
trickles is cut off with a 408 problem+json within a bounded time, on the app itself and on a
real uvicorn server with raw sockets."""

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.core.database import Database
from app.core.settings import settings
from app.main import create_app
from tests.conftest import new_key
from tests.threaded_server import threaded_server

BODY = json.dumps({"dataset_id": 1, "privacy": {"target_epsilon": 1.0}}).encode()


@pytest.fixture
def fast_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "request_grace_seconds", 0.3)
    monkeypatch.setattr(settings, "request_min_bytes_per_second", 100.0)
    monkeypatch.setattr(settings, "request_max_seconds", 2.0)


async def _call(app: FastAPI, key: str, gap: float, chunks: list[bytes],
                ends: bool = True) -> tuple[int, dict]:
    """POST ``chunks`` to /v1/jobs straight through ASGI, ``gap`` seconds apart (and then
    nothing, never ending the body, unless ``ends``)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "path": "/v1/jobs", "raw_path": b"/v1/jobs",
             "query_string": b"", "root_path": "", "scheme": "http",
             "client": ("127.0.0.1", 1), "server": ("test", 80),
             "headers": [(b"host", b"test"), (b"content-type", b"application/json"),
                         (b"authorization", f"Bearer {key}".encode())]}
    pending = list(chunks)
    sent: list[dict] = []

    async def receive() -> dict:
        if not pending:
            await asyncio.sleep(3600)  # the client has nothing more to say
        await asyncio.sleep(gap)
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending) or not ends}

    async def send(message: dict) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), timeout=30)  # unpaced: never ends
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert dict(start["headers"])[b"content-type"] == b"application/problem+json"
    return start["status"], json.loads(body)


def test_a_trickling_json_body_is_cut_off_with_408(client: TestClient, fast_pace: None) -> None:
    key = new_key("data_scientist")
    status, problem = asyncio.run(_call(client.app, key, 0.1,  # type: ignore[arg-type]
                                        [bytes([b]) for b in BODY]))
    assert status == 408, problem  # unpaced, the whole body would arrive: a 404 job
    assert problem["errors"][0]["field"] == "body"
    assert "100 bytes/s" in problem["errors"][0]["allowed"]


def test_a_body_that_stops_is_cut_off_by_the_time_limit(
    client: TestClient, fast_pace: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "request_min_bytes_per_second", 1e9)
    monkeypatch.setattr(settings, "request_grace_seconds", 10.0)
    key = new_key("data_scientist")
    status, problem = asyncio.run(_call(client.app, key, 0.0,  # type: ignore[arg-type]
                                        [BODY[:10]], ends=False))
    assert status == 408, problem
    assert "within 2 s" in problem["detail"]  # REQUEST_MAX_SECONDS


def test_a_body_at_a_fair_pace_is_read(client: TestClient, fast_pace: None) -> None:
    key = new_key("data_scientist")
    chunks = [BODY[i:i + 20] for i in range(0, len(BODY), 20)]
    status, problem = asyncio.run(_call(client.app, key, 0.05,  # type: ignore[arg-type]
                                        chunks))
    assert status == 404, problem  # read in full: the dataset does not exist


@pytest.fixture
def server(db: Database, fast_pace: None) -> Iterator[str]:
    with threaded_server(db, create_app(embedded_worker=False)) as address:
        yield address


def _trickle(host: str, key: str, answers: list[tuple[float, bytes]]) -> None:
    """Send a job's headers, then its JSON one byte every 0.2 s until answered."""
    address, port = host.split(":")
    began = time.monotonic()
    with socket.create_connection((address, int(port)), timeout=10) as conn:
        conn.sendall((f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                      f"{key}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(BODY)}\r\n\r\n").encode())
        conn.settimeout(0.2)
        answer, left = b"", list(BODY)
        while not answer and time.monotonic() - began < 10:
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                try:
                    conn.sendall(bytes([left.pop(0)]) if left else b"")
                except OSError:
                    break
        answers.append((time.monotonic() - began, answer))


@pytest.mark.slow  # a served process and 20 sockets for a few seconds
def test_trickling_clients_of_a_served_process_are_cut_off(server: str) -> None:
    key = new_key("data_scientist")
    answers: list[tuple[float, bytes]] = []
    threads = [threading.Thread(target=_trickle, args=(server, key, answers))
               for _ in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    assert httpx.get(f"http://{server}/healthz", timeout=5).status_code == 200
    for t in threads:
        t.join(timeout=15)
    assert len(answers) == 20
    for took, answer in answers:
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"application/problem+json" in answer and b"close" in answer.lower()
        assert took < 2.0  # grace 0.3 s, then 100 bytes/s: cut within a second or so
