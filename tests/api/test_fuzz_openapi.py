"""Property-based fuzzing of the whole API from its own OpenAPI schema (schemathesis).

Every operation gets schema-valid and schema-invalid requests, sent in-process through the
TestClient as an admin (every route admits admin). The checks: no 5xx, every error is
problem+json, status codes, content types, headers and bodies conform to the schema, invalid
input is rejected. Examples are bounded and derandomized so a CI run is short and reproducible
(about a minute for both databases on 2 cores).

No operation is excluded: the job- and audit-starting POSTs only queue (no worker runs here).
``positive_data_acceptance`` is not among the checks: rules across fields (exactly one of
target_epsilon and noise_multiplier, delta below 1/n_rows, a budget unless public, low_medium
below medium_high) are 422s that a JSON Schema cannot express.
"""

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis import Case, CheckContext
from schemathesis.checks import not_a_server_error
from schemathesis.core.transport import Response as StResponse
from schemathesis.python import asgi
from schemathesis.specs.openapi import checks as openapi_checks

from app.core.errors import PROBLEM_JSON
from app.main import create_app
from tests.api.seeded_app import ADMIN_KEY, ADMIN_KEY_ID, DECOY_KEY_ID, seeded_client
from tests.conftest import _postgres_database, _sqlite_database

# About 30 s over every operation: the full suite runs it, the fast lane does not even import
# it (collecting its cases builds every operation's examples).
pytestmark = pytest.mark.slow

MAX_EXAMPLES = 25

# The schema as the service publishes it; building the app touches no database.
schema = schemathesis.openapi.from_dict(create_app().openapi())


@schema.auth(refresh_interval=None)
class AdminKey:
    """Sends the admin key, except where schemathesis tests a request without one (401)."""

    def get(self, case: Case, ctx: schemathesis.AuthContext) -> str:
        return ADMIN_KEY

    def set(self, case: Case, data: str, ctx: schemathesis.AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schemathesis.check
def errors_are_problem_json(ctx: CheckContext, response: StResponse, case: Case) -> bool | None:
    """RFC 9457: every 4xx/5xx leaves as application/problem+json with the core members (on
    FHIR routes, as an OperationOutcome unless the client prefers problem+json)."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    if content_type.startswith("application/fhir+json"):
        outcome = response.json()
        assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"], outcome
        return True
    assert content_type.startswith(PROBLEM_JSON), f"{response.status_code} as {content_type!r}"
    body = response.json()
    for member in ("type", "title", "status", "detail"):
        assert member in body, f"problem document without {member!r}: {body}"
    assert body["status"] == response.status_code, body
    return True


CHECKS = [
    not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.negative_data_rejection,
    errors_are_problem_json,
]


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("fuzz-sqlite")
    yield from seeded_client(_sqlite_database(root), root)


@pytest.fixture(scope="module")
def postgres_app(
    tmp_path_factory: pytest.TempPathFactory, postgres_ready: bool
) -> Iterator[TestClient]:
    if not postgres_ready:
        pytest.skip("PostgreSQL not reachable")
    yield from seeded_client(_postgres_database(), tmp_path_factory.mktemp("fuzz-pg"))


BOUNDED = settings(
    max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=list(HealthCheck),  # module-scoped app; slow ledger operations
)


@schema.parametrize()
@BOUNDED
def test_api_conforms_to_its_schema(case: Case, sqlite_app: TestClient) -> None:
    """No 5xx, problem+json errors, and responses as the schema documents them (SQLite)."""
    call_and_validate(case, sqlite_app)


@pytest.mark.postgres
@schema.parametrize()
@BOUNDED
def test_api_conforms_to_its_schema_on_postgres(case: Case, postgres_app: TestClient) -> None:
    """The same on PostgreSQL, whose types are stricter (NUL in text, 32-bit ids)."""
    call_and_validate(case, postgres_app)


def call_and_validate(case: Case, client: TestClient) -> None:
    """Send ``case`` to the client's app and run every check on the answer."""
    _keep_admin_key(case)
    # The app in-process, through schemathesis' own ASGI session (its lifespan already ran).
    case.call_and_validate(session=asgi.get_client(client.app), checks=CHECKS)


def _keep_admin_key(case: Case) -> None:
    """Revoking the fuzzer's own key would turn every later request into a 401."""
    params: dict[str, Any] | None = case.path_parameters
    if case.path == "/v1/keys/{key_id}" and params and params.get("key_id") == ADMIN_KEY_ID:
        params["key_id"] = DECOY_KEY_ID
