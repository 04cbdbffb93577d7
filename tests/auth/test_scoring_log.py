"""Scoring's audit events: committed before the answer, in commits shared by concurrent calls,
and no score answered when the event cannot be written. (The SIGKILL test of a real server is
tests/e2e/test_scoring_audit_durability.py.)"""

import threading
import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event, text

from app.auth.principal import Principal
from app.auth.scoring_log import scoring_log
from app.core.database import Database, get_database, set_database
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT


def _scored(database: Database) -> int:
    with database.engine.connect() as conn:  # a connection of its own: only committed rows
        return int(conn.execute(text(
            "SELECT count(*) FROM audit_event WHERE action = 'risk.scored'")).scalar_one())


def test_the_event_is_committed_before_the_answer(client: TestClient, run_worker: Any) -> None:
    train_models(client, run_worker)
    for n in range(1, 4):
        assert client.post("/v1/risk", json={"features": PATIENT}).status_code == 200
        assert _scored(get_database()) == n


def test_no_score_is_answered_when_its_event_cannot_be_written(
    client: TestClient, run_worker: Any
) -> None:
    train_models(client, run_worker)
    with get_database().engine.begin() as conn:
        conn.execute(text("ALTER TABLE audit_event RENAME TO audit_event_away"))
    try:
        response = client.post("/v1/risk", json={"features": PATIENT})
        body = problem(response, 503, kind="audit-log-unavailable")
        assert "probability" not in body and response.headers["retry-after"]
    finally:
        with get_database().engine.begin() as conn:
            conn.execute(text("ALTER TABLE audit_event_away RENAME TO audit_event"))
    assert client.post("/v1/risk", json={"features": PATIENT}).status_code == 200


def test_concurrent_calls_share_commits(db: Database) -> None:
    """With a slow disk (20 ms per commit here), 40 simultaneous calls need a few commits."""
    set_database(db)
    commits = []

    @event.listens_for(db.engine, "commit")
    def _slow_commit(_conn: Any) -> None:
        commits.append(1)
        time.sleep(0.02)

    start = threading.Barrier(40)
    who = Principal(name="clinic", role="clinician")

    def call() -> None:
        start.wait()
        scoring_log.write(api_key_id=None, actor=who.name, role=who.role,
                          action="risk.scored", target="model/1",
                          detail={"endpoint": "risk", "patients": 1}, request_id=None)

    try:
        threads = [threading.Thread(target=call) for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert _scored(db) == 40
        assert len(commits) <= 10, len(commits)
    finally:
        event.remove(db.engine, "commit", _slow_commit)
        set_database(None)
