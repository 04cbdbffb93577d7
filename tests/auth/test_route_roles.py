"""Every route, called with every role and with no key, answers as this table says: 401 without
a key, 403 for a role it does not admit, and neither for one it does (admin is admitted
everywhere). A route missing from the table fails the test until someone decides its roles.

Runs on SQLite and PostgreSQL (the key lookup is a query on either).
"""

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

PUBLIC = "public"
ST, DS, PO, CL = "data_steward", "data_scientist", "privacy_officer", "clinician"
ROLES = ("admin", ST, DS, PO, CL)
ADMIN_ONLY: frozenset[str] = frozenset()

TABLE: dict[tuple[str, str], frozenset[str] | str] = {
    # Probes, the dashboard's static files and the API's own documentation: no key.
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/dashboard"): PUBLIC,
    ("GET", "/dashboard/privacy"): PUBLIC,
    ("GET", "/dashboard/static/{name}"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/docs/static/{name}"): PUBLIC,  # Swagger UI and ReDoc, served offline
    # Datasets: data stewards hold the tables: they register datasets (any source), send and
    # erase rows (a registration or upload that collides is answered only to them);
    # data scientists and privacy officers read datasets, budgets and reports.
    ("POST", "/v1/datasets"): frozenset({ST}),
    ("GET", "/v1/datasets"): frozenset({ST, DS, PO}),
    ("GET", "/v1/datasets/{dataset_id}"): frozenset({ST, DS, PO}),
    ("PUT", "/v1/datasets/{dataset_id}/data"): frozenset({ST}),
    ("DELETE", "/v1/datasets/{dataset_id}/data"): frozenset({ST}),
    ("GET", "/v1/uploads/{upload_id}"): frozenset({ST}),
    ("PUT", "/v1/datasets/{dataset_id}/patient-ids"): frozenset({ST}),
    ("DELETE", "/v1/datasets/{dataset_id}"): frozenset({ST}),
    ("PUT", "/v1/datasets/{dataset_id}/privacy-budget"): ADMIN_ONLY,
    ("GET", "/v1/datasets/{dataset_id}/privacy-report"): frozenset({ST, DS, PO}),
    ("GET", "/v1/datasets/{dataset_id}/ledger/verify"): frozenset({PO}),
    # The organisation's per-patient budget: the tables' holders and privacy officers read it
    # (the most-spent patients' spend); only admins change it; privacy officers verify its
    # chain.
    ("GET", "/v1/patient-budget"): frozenset({ST, PO}),
    ("PUT", "/v1/patient-budget"): ADMIN_ONLY,
    ("GET", "/v1/patient-budget/verify"): frozenset({PO}),
    # Jobs: data scientists submit and cancel; the job's report is also the model card
    # clinicians may read.
    ("POST", "/v1/jobs"): frozenset({DS}),
    ("GET", "/v1/jobs"): frozenset({DS, PO}),
    ("GET", "/v1/jobs/{job_id}"): frozenset({DS, PO}),
    ("POST", "/v1/jobs/{job_id}/cancel"): frozenset({DS}),
    ("GET", "/v1/jobs/{job_id}/privacy-report"): frozenset({DS, PO, CL}),
    # DP cohort statistics: data scientists and privacy officers ask (a release spends the
    # dataset's budget) and read; clinicians may not.
    ("POST", "/v1/datasets/{dataset_id}/statistics"): frozenset({DS, PO}),
    ("GET", "/v1/datasets/{dataset_id}/statistics"): frozenset({DS, PO}),
    ("GET", "/v1/statistics/{release_id}"): frozenset({DS, PO}),
    # Privacy audits of training jobs (app/privacy_audit): data scientists and privacy officers,
    # who may also request one (it charges no budget and runs only on public datasets).
    ("POST", "/v1/audits"): frozenset({DS, PO}),
    ("GET", "/v1/audits"): frozenset({DS, PO}),
    ("GET", "/v1/audits/{audit_id}"): frozenset({DS, PO}),
    ("GET", "/v1/audits/{audit_id}/report"): frozenset({DS, PO}),
    # Monitoring runs: charged like a job; read by those who read evaluations and ledgers.
    ("POST", "/v1/models/{model_id}/monitoring-runs"): frozenset({DS}),
    ("GET", "/v1/monitoring-runs/{run_id}"): frozenset({DS, PO}),
    ("GET", "/v1/models/{model_id}/monitoring"): frozenset({DS, PO}),
    ("POST", "/v1/monitoring-runs/{run_id}/retrain"): frozenset({DS}),
    ("POST", "/v1/models/{model_id}/comparisons"): frozenset({DS}),
    ("GET", "/v1/comparisons/{comparison_id}"): frozenset({DS, PO}),
    ("POST", "/v1/federations"): ADMIN_ONLY,
    ("GET", "/v1/federations/{federation_id}"): frozenset({ST, DS, PO}),
    ("POST", "/v1/federations/{federation_id}/join"): frozenset({ST}),
    # Models: everyone reads (the dashboard lists them); data scientists change them.
    ("GET", "/v1/models"): frozenset({DS, PO, CL}),
    ("GET", "/v1/models/active"): frozenset({DS, PO, CL}),
    ("GET", "/v1/models/activations"): frozenset({DS, PO, CL}),
    ("GET", "/v1/models/{model_id}"): frozenset({DS, PO, CL}),
    ("POST", "/v1/models/rollback"): frozenset({DS}),
    ("POST", "/v1/models/{model_id}/activate"): frozenset({DS}),
    ("PUT", "/v1/models/{model_id}/band-thresholds"): frozenset({DS}),
    # Scoring, in every form an EHR or the dashboard uses: clinicians.
    ("POST", "/v1/risk"): frozenset({CL}),
    ("POST", "/v1/risk/batch"): frozenset({CL}),
    ("POST", "/v1/risk/fhir"): frozenset({CL}),
    ("GET", "/cds-services"): frozenset({CL}),
    ("POST", "/cds-services/{service_id}"): frozenset({CL}),
    ("POST", "/cds-services/{service_id}/feedback"): frozenset({CL}),
    # The service's FHIR CodeSystems: public definitions, served at their canonical URLs.
    ("GET", "/fhir/CodeSystem"): PUBLIC,
    ("GET", "/fhir/CodeSystem/{code_system_id}"): PUBLIC,
    ("GET", "/v1/features"): frozenset({ST, DS, PO, CL}),
    # The release inventory (what leaves the service, and its mechanism): every role reads it.
    ("GET", "/v1/privacy/inventory"): frozenset({ST, DS, PO, CL}),
    # Keys: admin. The audit log and metrics: read-only for privacy officers.
    ("POST", "/v1/keys"): ADMIN_ONLY,
    ("GET", "/v1/keys"): ADMIN_ONLY,
    ("DELETE", "/v1/keys/{key_id}"): ADMIN_ONLY,
    ("GET", "/v1/audit-log"): frozenset({PO, ST}),
    ("GET", "/metrics"): frozenset({PO}),
}


def _routes(client: TestClient) -> set[tuple[str, str]]:
    found = set()
    for route in iter_route_contexts(client.app.routes):  # type: ignore[attr-defined]
        if route.path is not None:
            found |= {(m, route.path) for m in route.methods or () if m != "HEAD"}
    return found


def _openapi_operations(client: TestClient) -> set[tuple[str, str]]:
    schema = client.get("/openapi.json").json()
    return {(m.upper(), path) for path, ops in schema["paths"].items() for m in ops}


def _call(client: TestClient, method: str, path: str) -> int:
    """One call with placeholder ids (no such resource) and an empty body: an admitted role
    gets a 404 or 422 from the route itself, a refused one 401 or 403 before it."""
    url = re.sub(r"\{[^}]+\}", "999999", path)
    if path == "/dashboard/static/{name}":
        url = "/dashboard/static/common.js"
    body = {} if method in ("POST", "PUT") else None
    return client.request(method, url, json=body).status_code


def test_the_table_covers_every_route(any_client: TestClient) -> None:
    routes = _routes(any_client)
    assert _openapi_operations(any_client) <= routes
    assert set(TABLE) == routes, {
        "routes without roles in the table": sorted(routes - set(TABLE)),
        "table rows without a route": sorted(set(TABLE) - routes),
    }


def test_every_route_with_every_role(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    callers = {"no key": client_as(None), **{role: client_as(role) for role in ROLES}}
    wrong = []
    for (method, path), admitted in sorted(TABLE.items()):
        for who, caller in callers.items():
            status = _call(caller, method, path)
            if admitted == PUBLIC:
                ok = status not in (401, 403)
            elif who == "no key":
                ok = status == 401
            elif who == "admin" or who in admitted:
                ok = status not in (401, 403)
            else:
                ok = status == 403
            if not ok:
                wrong.append(f"{method} {path} as {who}: {status}")
    assert not wrong, "\n".join(wrong)


ROLES_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"  # linked from the README


def _readme_role_rows() -> dict[str, str]:
    """The documented role table (docs/api.md): role -> what its row says it may call."""
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", ROLES_DOC.read_text(encoding="utf-8"), re.M)
    return {role: text for role, text in rows if role in ROLES}


def test_the_readme_role_table_names_every_write_a_read_only_role_may_make() -> None:
    """A role the docs call read-only may change nothing its row does not name: every
    POST, PUT or DELETE this table admits it to must appear in its row."""
    rows = _readme_role_rows()
    assert set(rows) == set(ROLES), rows
    unnamed = [
        f"{role}: {method} {path}"
        for (method, path), admitted in TABLE.items()
        if admitted != PUBLIC and method != "GET"
        for role in sorted(admitted)
        if "read-only" in rows[role] and f"{method} {path}" not in rows[role]
    ]
    assert not unnamed, f"docs/api.md calls these roles read-only, yet they may call: {unnamed}"


def test_a_refusal_quotes_the_role_as_its_plain_word(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """The dashboard reads the role from a 403's detail: ``role 'clinician' may not call``,
    never an enum's repr."""
    refused = client_as("clinician").get("/v1/datasets")
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("role 'clinician' may not call GET")
