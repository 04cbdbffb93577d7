"""A small bad body gets a small 422: error lists are capped and validation stops early.

The trial's request: 4,000 patients x 100 unknown keys (4 MB) to ``POST /v1/risk/batch`` once
answered a 123 MB 422 after 12.5 s. Every answer now lists at most ``MAX_LISTED_ERRORS`` errors
with ``error_count`` (the errors found), and ``complete: false`` when validation stopped early.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.validation import MAX_LISTED_ERRORS
from app.scoring.schemas import MAX_BATCH
from tests.api.scoring_helpers import problem
from tests.api.seeded_app import seeded_client
from tests.conftest import PATIENT, _sqlite_database

JSON = {"content-type": "application/json"}
SMALL_ANSWER_BYTES = 64 * 1024


def _post(client: TestClient, path: str, body: object) -> tuple[dict, int]:
    """The 422's problem document and the body's size. The answer's speed is
    bench territory; what makes it fast is checked here: a capped list and an early stop
    (``complete: false`` with fewer errors counted than the body holds)."""
    content = json.dumps(body).encode()
    response = client.post(path, content=content, headers=JSON)
    assert len(response.content) < SMALL_ANSWER_BYTES, len(response.content)
    return problem(response, 422), len(content)


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """An app with an active model: features are checked against the scoring model."""
    root: Path = tmp_path_factory.mktemp("amplification")
    yield from seeded_client(_sqlite_database(root), root)


def test_the_trials_batch_gets_a_small_fast_answer(scorer: TestClient) -> None:
    clinician = scorer
    unknown = {f"unknown_{j}": 1 for j in range(100)}
    body = {"patients": [{"features": unknown} for _ in range(4000)]}
    answer, sent = _post(clinician, "/v1/risk/batch", body)
    assert sent > 3_000_000
    assert len(answer["errors"]) == MAX_LISTED_ERRORS
    assert MAX_LISTED_ERRORS <= answer["error_count"] < 4000 * 100
    assert answer["complete"] is False  # validation stopped: more patients were not checked
    assert answer["errors"][0]["field"].startswith("patients.0.features.")


def test_one_object_with_many_unknown_keys_is_counted_not_listed(scorer: TestClient) -> None:
    clinician = scorer
    features = {**PATIENT, **{f"k{j}": 0 for j in range(300_000)}}
    answer, _ = _post(clinician, "/v1/risk", {"features": features})
    assert len(answer["errors"]) == MAX_LISTED_ERRORS
    # Every unknown key is counted; the known ones went unchecked, so it is a lower bound.
    assert answer["error_count"] == 300_000 and answer["complete"] is False
    assert answer["errors"][0] == {
        "field": "features.k0", "message": "Extra inputs are not permitted",
        "allowed": "features: " + ", ".join(PATIENT),
    }
    assert "299900 or more other error(s)" in answer["detail"]


def test_every_request_body_caps_unknown_keys(scorer: TestClient) -> None:
    """The cap is the request models' base rule, not the scoring schema's alone."""
    body = {"name": "x", **{f"typo_{j}": 1 for j in range(5000)}}
    answer, _ = _post(scorer, "/v1/keys", body)
    assert len(answer["errors"]) == MAX_LISTED_ERRORS
    assert answer["error_count"] == 5000 and answer["complete"] is False


def test_a_few_errors_are_all_listed_with_their_count(scorer: TestClient) -> None:
    patients = [{"features": PATIENT}] * 40 + [{"features": {**PATIENT, "phq9": 99}}] * 3
    answer, _ = _post(scorer, "/v1/risk/batch", {"patients": patients})
    assert [e["field"] for e in answer["errors"]] == [
        f"patients.{k}.features.phq9" for k in (40, 41, 42)
    ]
    assert answer["error_count"] == 3 and "complete" not in answer


@pytest.mark.parametrize("bad_every", [1, 7])
def test_a_batch_of_bad_patients_stops_after_the_listed_errors(
    scorer: TestClient, bad_every: int
) -> None:
    patients = [{"features": {**PATIENT, "phq9": 99} if k % bad_every == 0 else PATIENT}
                for k in range(MAX_BATCH)]
    answer, _ = _post(scorer, "/v1/risk/batch", {"patients": patients})
    listed = [e["field"] for e in answer["errors"]]
    assert listed == [f"patients.{k}.features.phq9" for k in range(0, MAX_BATCH, bad_every)][
        :MAX_LISTED_ERRORS]
    assert MAX_LISTED_ERRORS <= answer["error_count"] < MAX_BATCH / bad_every
    assert answer["complete"] is False
