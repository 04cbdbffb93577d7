"""Hostile input: oversized bodies, numbers that overflow, odd Unicode. Always a 4xx problem.

The size limit is checked both ways a body can arrive: with a ``Content-Length`` (refused before
the app reads it) and chunked (refused while it streams). Overflowing numbers must never reach
the database, whose integer types are narrower than Python's. Names accept any printable
Unicode and refuse control characters, NUL above all (PostgreSQL cannot store it); invisible
format characters (a right-to-left override) are refused too (``test_input_refusals``).
"""

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.ids import MAX_ID
from app.core.settings import settings
from app.scoring.schemas import MAX_BATCH
from tests.api.scoring_helpers import train_models
from tests.api.test_bad_input import assert_problem, snapshot
from tests.conftest import PATIENT, SMALL_DATASET, small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

JSON = {"content-type": "application/json"}


# --------------------------------------------------------------------------- body size


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    limit = 4096
    monkeypatch.setattr(settings, "max_request_bytes", limit)
    return limit


def _padded_dataset(size: int) -> bytes:
    """A valid-looking dataset body of ``size`` bytes (the name is far too long anyway)."""
    body = json.dumps({**SMALL_DATASET, "name": ""})
    return body.replace('"name": ""', '"name": "' + "x" * (size - len(body)) + '"').encode()


def test_default_limit_is_16_mib_and_fits_the_largest_batch() -> None:
    assert settings.max_request_bytes == 16 * 2**20
    patient = {"id": "p" * 128, "features": {k: 100 for k in PATIENT}}
    largest = json.dumps({"patients": [patient] * MAX_BATCH, "model_id": MAX_ID})
    assert len(largest) < settings.max_request_bytes / 4


def test_declared_length_over_the_limit_is_413(client: TestClient, small_limit: int) -> None:
    before = snapshot(client)
    response = client.post("/v1/datasets", content=_padded_dataset(small_limit + 1),
                           headers=JSON)
    body = assert_problem(response, 413, kind="content-too-large")
    assert body["max_bytes"] == small_limit, body
    assert str(small_limit) in body["detail"], body
    assert snapshot(client) == before


def test_chunked_body_over_the_limit_is_413(client: TestClient, small_limit: int) -> None:
    """No Content-Length: the body is counted while it streams in."""
    payload = _padded_dataset(3 * small_limit)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 1000):
            yield payload[start:start + 1000]

    before = snapshot(client)
    response = client.post("/v1/datasets", content=chunks(), headers=JSON)
    assert "content-length" not in response.request.headers
    body = assert_problem(response, 413, kind="content-too-large")
    assert body["max_bytes"] == small_limit, body
    assert snapshot(client) == before


def test_body_at_the_limit_is_read(client: TestClient, small_limit: int) -> None:
    """Exactly the limit passes the size check (and fails validation: the name is too long)."""
    response = client.post("/v1/datasets", content=_padded_dataset(small_limit), headers=JSON)
    assert_problem(response, 422, field="name")


def test_oversized_body_on_a_route_without_body_is_413(
    client: TestClient, small_limit: int
) -> None:
    response = client.request("GET", "/v1/datasets", content=b"x" * (small_limit + 1))
    assert_problem(response, 413)


def test_413_is_documented_on_every_operation_with_a_body(client: TestClient) -> None:
    for path, item in client.get("/openapi.json").json()["paths"].items():
        for method, operation in item.items():
            if "requestBody" in operation:
                content = operation["responses"]["413"]["content"]
                assert "application/problem+json" in content, (method, path)


# --------------------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    "path",
    [f"/v1/{kind}/{value}" for kind in ("datasets", "jobs", "models", "audits")
     for value in (MAX_ID + 1, 10**40)]
    + [f"/v1/datasets/{2**63}/privacy-report", f"/v1/datasets/{2**63}/ledger/verify",
       f"/v1/jobs/{2**64}/privacy-report"],
)
def test_huge_path_ids_are_422(any_client: TestClient, path: str) -> None:
    field = {"datasets": "dataset_id", "jobs": "job_id", "models": "model_id",
             "audits": "audit_id"}[path.split("/")[2]]
    assert_problem(any_client.get(path), 422, field=field, allowed=(f"[1, {MAX_ID}]",))


def test_largest_id_is_a_plain_404(any_client: TestClient) -> None:
    assert_problem(any_client.get(f"/v1/jobs/{MAX_ID}"), 404)


@pytest.mark.parametrize("query", [f"dataset_id={2**63}", f"offset={2**63}", "offset=1e400",
                                   f"limit={10**30}"])
def test_huge_query_numbers_are_422(any_client: TestClient, query: str) -> None:
    response = any_client.get(f"/v1/jobs?{query}")
    assert_problem(response, 422, field=query.split("=")[0])


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/jobs", {"dataset_id": 2**63, "privacy": {"noise_multiplier": 1}}, "dataset_id"),
        ("/v1/audits", {"job_id": 2**63}, "job_id"),
        ("/v1/risk", {"features": PATIENT, "model_id": 2**64}, "model_id"),
        ("/v1/risk", {"features": {**PATIENT, "phq9": 10**30}}, "features.phq9"),
        ("/v1/risk", {"features": {**PATIENT, "age": -(10**30)}}, "features.age"),
        ("/v1/datasets", {**SMALL_DATASET, "source": {"kind": "synthetic", "n_rows": 2**70}},
         "source.n_rows"),
    ],
)
def test_huge_body_integers_are_422(
    any_client: TestClient, run_worker: Any, path: str, body: dict[str, Any], field: str
) -> None:
    if field.startswith("features."):
        train_models(any_client, run_worker)  # features are checked against the scoring model
    before = snapshot(any_client)
    assert_problem(any_client.post(path, json=body), 422, field=field)
    assert snapshot(any_client) == before


@pytest.mark.parametrize(
    ("path", "template", "field"),
    [
        ("/v1/risk", '{"features": {"age": 34, "phq9": 1e400, "gaf": 35, "num_sessions": 12, '
         '"substance_use": 1, "prior_crisis": 1}}', "features.phq9"),
        ("/v1/datasets", '{"name": "x", "source": {"kind": "synthetic", "n_rows": 2000}, '
         '"privacy_budget": {"epsilon": 1e400, "delta": 1e-5}}', "privacy_budget.epsilon"),
        ("/v1/datasets", '{"name": "x", "source": {"kind": "synthetic", "n_rows": 2000}, '
         '"privacy_budget": {"epsilon": 1, "delta": -1e400}}', "privacy_budget.delta"),
    ],
)
def test_floats_that_overflow_to_infinity_are_422(
    any_client: TestClient, run_worker: Any, path: str, template: str, field: str
) -> None:
    """JSON has no infinity, but Python's parser reads 1e400 as one."""
    if field.startswith("features."):
        train_models(any_client, run_worker)  # features are checked against the scoring model
    assert_problem(any_client.post(path, content=template, headers=JSON), 422, field=field)


def test_integer_with_thousands_of_digits_is_4xx(client: TestClient) -> None:
    """Python refuses to parse ints over 4300 digits (a DoS guard): still a problem, not 500."""
    text = json.dumps({"features": PATIENT}).replace('"phq9": 22', '"phq9": ' + "9" * 5000)
    response = client.post("/v1/risk", content=text, headers=JSON)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")


# --------------------------------------------------------------------------- unicode names

UNICODE_NAMES = [
    pytest.param("crisis cohort 🧠📈", id="emoji"),
    pytest.param("مجموعة الأزمات", id="arabic-rtl"),
    pytest.param("קבוצת משבר 2024", id="hebrew-rtl-digits"),
    pytest.param("Zoë – naïve café", id="accents"),
    pytest.param("👩\u200d⚕️" * 50, id="zwj-sequences"),
]


@pytest.mark.parametrize("name", UNICODE_NAMES)
def test_unicode_dataset_names_round_trip(any_client: TestClient, name: str) -> None:
    created = any_client.post("/v1/datasets", json=small_dataset(name=name))
    assert created.status_code == 201, created.text
    assert created.json()["name"] == name
    read = any_client.get(f"/v1/datasets/{created.json()['id']}")
    assert read.json()["name"] == name
    listed = any_client.get("/v1/datasets").json()["items"]
    assert name in [d["name"] for d in listed]


@pytest.mark.parametrize(
    "name", ["nul\x00byte", "\x00", "tab\there", "line\nbreak", "bell\x07", "del\x7f"]
)
def test_control_characters_in_names_are_422(any_client: TestClient, name: str) -> None:
    """NUL above all: PostgreSQL text cannot hold it, so it must never reach an INSERT."""
    before = snapshot(any_client)
    response = any_client.post("/v1/datasets", json=small_dataset(name=name))
    assert_problem(response, 422, field="name")
    assert snapshot(any_client) == before


@pytest.mark.parametrize("actor", ["nul\x00", "🧠", "\u202e"])
def test_unicode_in_text_filters_is_never_a_500(any_client: TestClient, actor: str) -> None:
    response = any_client.get("/v1/audit-log", params={"actor": actor})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert_problem(response, response.status_code)


@pytest.mark.parametrize("name", ["nul\x00key", "🧠"])
def test_key_names_with_nul_or_emoji_are_4xx(any_client: TestClient, name: str) -> None:
    response = any_client.post("/v1/keys", json={"name": name, "role": "clinician"})
    assert_problem(response, 422, field="name")
