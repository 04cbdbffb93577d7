"""An answered scoring call's audit event survives a SIGKILL of the server (group commit).

The trial: 20 ``POST /v1/risk`` answers, then ``kill -9``: 0 of the 20 ``risk.scored`` events
were in the database, as they waited in memory for a periodic flush. Now an answer leaves only
after its event is committed, so every answered call is in the log however the process ends.
"""

import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.processes import api_client, server_log, start_server, wait_ready
from tests.api.scoring_helpers import QUICK_JOB
from tests.conftest import PATIENT, small_dataset

pytestmark = pytest.mark.slow  # a real server imports torch and trains a model: ~10 s

CALLS = 20


def _train(base: str) -> None:
    with api_client(base) as http:
        dataset = http.post("/v1/datasets", json=small_dataset())
        assert dataset.status_code == 201, dataset.text
        job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **QUICK_JOB})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 60
        while (state := http.get(job.headers["location"]).json())["status"] in (
                "queued", "running"):
            assert time.monotonic() < deadline, state
            time.sleep(0.1)
        assert state["status"] == "succeeded", state


def _scored_events(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        return int(conn.execute(
            "SELECT count(*) FROM audit_event WHERE action = 'risk.scored'").fetchone()[0])


def test_answered_scoring_events_survive_sigkill(tmp_path: Path) -> None:
    process, base = start_server(tmp_path)
    try:
        wait_ready(process, base)
        _train(base)
        with api_client(base) as http:
            http.post("/v1/risk", json={"features": PATIENT}).raise_for_status()  # warm up

            def score(_: int) -> int:
                return http.post("/v1/risk", json={"features": PATIENT}).status_code

            with ThreadPoolExecutor(4) as pool:  # concurrent calls share commits
                statuses = list(pool.map(score, range(CALLS)))
        assert statuses == [200] * CALLS
        process.send_signal(signal.SIGKILL)  # at once: no shutdown, no flush
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert _scored_events(tmp_path / "var" / "dpcrisis.db") == CALLS + 1, server_log(process)
