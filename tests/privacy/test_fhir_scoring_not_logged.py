"""Patient features sent for scoring never reach a log record or the audit log: the FHIR route
(``/v1/risk`` and ``/v1/risk/batch`` are checked in tests/observability/test_logging.py, CDS
Hooks in tests/cdshooks/test_cds_hooks.py)."""

import io
import json
import re
from typing import Any

from fastapi.testclient import TestClient

from tests.api.scoring_helpers import train_models

# Values no other line would print by chance; each is checked as "name ... value".
DISTINCTIVE = {"age": 67, "phq9": 23, "gaf": 29, "num_sessions": 43, "substance_use": 1,
               "prior_crisis": 0}
SUBJECT = "Patient/zq-5521-fhir"
OBSERVATION = "Observation/phq9-zq-8813"
OUT_OF_RANGE_GAF = 876543


def _assert_no_patient_value(text: str) -> None:
    assert SUBJECT not in text and OBSERVATION not in text
    assert str(OUT_OF_RANGE_GAF) not in text
    for name, value in DISTINCTIVE.items():
        assert not re.search(rf"{name}\W{{1,6}}{value}\b", text), name
    assert '"features"' not in text


def test_fhir_scoring_logs_no_feature(
    client: TestClient, run_worker: Any, json_log: io.StringIO
) -> None:
    train_models(client, run_worker)
    start = len(json_log.getvalue())
    body = {"features": DISTINCTIVE, "subject": SUBJECT, "basis": {"phq9": OBSERVATION}}
    assert client.post("/v1/risk/fhir", json=body).status_code == 200
    bad = {**body, "features": {**DISTINCTIVE, "gaf": OUT_OF_RANGE_GAF}}
    assert client.post("/v1/risk/fhir", json=bad).status_code == 422
    truncated = json.dumps(body)[:-7]
    assert client.post("/v1/risk/fhir", content=truncated,
                       headers={"content-type": "application/json"}).status_code in (400, 422)

    logged = json_log.getvalue()[start:]
    assert logged, "the requests logged nothing at all: the check would be vacuous"
    _assert_no_patient_value(logged)
    events = client.get("/v1/audit-log", params={"action": "risk.scored"}).json()["items"]
    assert [e["detail"] for e in events] == [{"endpoint": "risk/fhir", "patients": 1}]
    _assert_no_patient_value(json.dumps(events))
