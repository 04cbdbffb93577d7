"""A server killed (SIGKILL) while an upload's body arrives leaves its dataset ready for a new
upload as soon as it starts again, with the default lease: the claim names the killed process,
so the start gives it back at once and deletes its spool."""

import signal
import socket
import time
from pathlib import Path

import pytest

from bench.processes import ADMIN_KEY, api_client, start_server, wait_ready
from tests.datasets.test_upload_api import SCHEMA, _csv, _rows


@pytest.mark.slow
def test_a_killed_upload_leaves_its_dataset_for_a_new_one(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UPLOAD_CLAIM_LEASE_SECONDS", raising=False)  # the default, 30 s
    monkeypatch.setenv("UPLOAD_GRACE_SECONDS", "600")  # the pace never cuts it first
    process, base = start_server(tmp_path)
    try:
        wait_ready(process, base)
        with api_client(base) as http:
            created = http.post("/v1/datasets", json={
                "name": "clinic", "source": {"kind": "upload"}, "schema": SCHEMA,
                "privacy_budget": {"epsilon": 3, "delta": 1e-5}})
            assert created.status_code == 201, created.text
        dataset_id = created.json()["id"]
        host, port = base.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)))
        conn.sendall((f"PUT /v1/datasets/{dataset_id}/data HTTP/1.1\r\n"
                      f"Host: {host}\r\nAuthorization: Bearer {ADMIN_KEY}\r\n"
                      "Content-Type: text/csv\r\nContent-Length: 1000000\r\n\r\n"
                      "patient_id,phq9,sex,prior_crisis,crisis_30d\np1,3,female,0,0\n").encode())
        time.sleep(1.0)  # the body is arriving: the dataset is claimed, its spool on disk
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=15)
        conn.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    data = tmp_path / "var" / "data"
    assert [p.name for p in data.iterdir() if p.name.startswith(".spool-")]
    restarted = time.monotonic()  # well within the dead claim's lease
    process, base = start_server(tmp_path)
    try:
        wait_ready(process, base)
        assert time.monotonic() - restarted < 30
        assert not [p for p in data.iterdir() if p.name.startswith(".spool-")]
        with api_client(base) as http:
            assert http.get(f"/v1/datasets/{dataset_id}").json()["state"] == "awaiting_data"
            sent = http.put(f"/v1/datasets/{dataset_id}/data", content=_csv(_rows(300)),
                            headers={"Content-Type": "text/csv", "Prefer": "wait=60"})
            assert sent.status_code == 200 and sent.json()["state"] == "ready", sent.text
    finally:
        process.terminate()
        process.wait(timeout=30)
