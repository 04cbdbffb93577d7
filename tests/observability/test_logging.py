"""JSON logs with request and job ids, X-Request-ID, and no patient feature in any log record."""

import io
import json
import logging
import re
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.observability.request_id import HEADER, RequestIdMiddleware
from tests.api.scoring_helpers import train_models

# A patient no other test or log line would produce by chance: each value is checked as
# "name ... value" and the batch id and the out-of-range value must appear nowhere at all.
DISTINCTIVE = {"age": 73, "phq9": 19, "gaf": 41, "num_sessions": 37, "substance_use": 1,
               "prior_crisis": 0}
PATIENT_ID = "patient-zx81-7c4e"
OUT_OF_RANGE_AGE = 987654


def _records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_records_are_json_objects_with_the_context_ids(json_log: io.StringIO) -> None:
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware)

    @app.get("/work")
    def work() -> dict[str, str]:
        logging.getLogger("dpcrisis.test").warning("handled %s", "it")
        return {}

    client = TestClient(app)
    echoed = client.get("/work", headers={HEADER: "gateway-7f3a:42"})
    assert echoed.headers[HEADER] == "gateway-7f3a:42"
    generated = client.get("/work").headers[HEADER]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    # An id that could forge or flood log lines is replaced, not echoed.
    assert client.get("/work", headers={HEADER: "x" * 500}).headers[HEADER] != "x" * 500
    assert client.get("/work", headers={HEADER: 'a" b'}).headers[HEADER] != 'a" b'
    logging.getLogger("dpcrisis.test").info("outside any request")

    records = _records(json_log)
    handled = [r for r in records if r["message"] == "handled it"]
    assert [r["request_id"] for r in handled[:2]] == ["gateway-7f3a:42", generated]
    assert {"time", "level", "logger", "message"} <= set(handled[0])
    assert handled[0]["level"] == "WARNING" and handled[0]["logger"] == "dpcrisis.test"
    assert "request_id" not in records[-1]


def test_the_service_echoes_request_ids(client: TestClient) -> None:
    assert client.get("/healthz", headers={HEADER: "abc-123"}).headers[HEADER] == "abc-123"
    assert client.get("/v1/jobs/999").headers[HEADER]  # problem responses carry one too


def test_worker_records_carry_the_job_id(
    client: TestClient, run_worker: Any, json_log: io.StringIO
) -> None:
    train_models(client, run_worker)
    worker_records = [r for r in _records(json_log) if r["logger"] == "dpcrisis.worker"]
    claimed = [r for r in worker_records if "claimed" in r["message"]]
    assert claimed and claimed[0]["job_id"] == 1 and claimed[0]["worker_id"] == "test-worker"


def test_patient_features_appear_in_no_log_record(
    client: TestClient, run_worker: Any, json_log: io.StringIO
) -> None:
    train_models(client, run_worker)
    start = len(json_log.getvalue())
    assert client.post("/v1/risk", json={"features": DISTINCTIVE}).status_code == 200
    batch = {"patients": [{"id": PATIENT_ID, "features": DISTINCTIVE}]}
    assert client.post("/v1/risk/batch", json=batch).status_code == 200
    bad = {"features": {**DISTINCTIVE, "age": OUT_OF_RANGE_AGE}}
    assert client.post("/v1/risk", json=bad).status_code == 422
    assert client.post("/v1/risk", content=json.dumps(bad)[:-9],
                       headers={"content-type": "application/json"}).status_code in (400, 422)

    logged = json_log.getvalue()[start:]
    assert logged, "the requests logged nothing at all: the check would be vacuous"
    assert PATIENT_ID not in logged and str(OUT_OF_RANGE_AGE) not in logged
    for name, value in DISTINCTIVE.items():
        assert not re.search(rf"{name}\W{{1,6}}{value}\b", logged), name
    assert '"features"' not in logged
