"""The federation routes in process: who may declare, read and join a federation, what a bad
declaration or a refused join answers (problem+json naming what is wrong), and that a join
queues the site's job and reserves its whole plan on the dataset's ledger, or stores nothing.

No worker runs here: the ``client`` fixture's app embeds none, so a queued federated job is
never claimed (a site's worker would try to reach the coordinator for minutes).
"""

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from app.federation.signing import new_key
from tests.conftest import small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

ClientAs = Callable[[str | None], TestClient]
PROBLEM_JSON = "application/problem+json"
CRISIS_SHA = schema_hash(BUILT_IN_SCHEMA)
KEY = new_key()[1]
OTHER_SHA = "0123456789abcdef" * 4
ROUNDS, LOCAL_STEPS, TARGET = 3, 4, 2.0
READERS = ("data_steward", "data_scientist", "privacy_officer")
NOTHING: dict[str, Any] = {"jobs": [], "entries": []}


def federation(**changes: Any) -> dict[str, Any]:
    """A site's declaration of a two-clinic federation, with ``changes`` applied."""
    body: dict[str, Any] = {
        "name": "crisis-network", "role": "site", "address": "coordinator.example:9092",
        "schema_sha256": CRISIS_SHA,
        "recipe": {"rounds": ROUNDS, "local_steps": LOCAL_STEPS, "target_epsilon": TARGET},
        "sites": [{"name": "clinic-a"}, {"name": "clinic-b", "weight": 2.0}],
        "site_name": "clinic-a",
    }
    body.update(changes)
    return body


def recipe(**changes: Any) -> dict[str, Any]:
    return {**federation()["recipe"], **changes}


def problem(response: Response, status: int, kind: str | None = None) -> dict[str, Any]:
    """The problem+json body of ``response``, checked to have ``status`` (and ``kind``)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["detail"], body
    if kind is not None:
        assert body["type"].endswith(f"/{kind}"), body
    return body


def error_naming(body: dict[str, Any], field: str) -> dict[str, Any]:
    """The listed error about ``field`` (a rule across fields is filed under the field it
    checks: ``sites`` for the recipe's quorum, ``site_name`` for the role's)."""
    for error in body.get("errors", []):
        if error["field"] == field:
            return dict(error)
    raise AssertionError(f"no error names {field!r}: {body}")


def declare(client: TestClient, body: dict[str, Any]) -> int:
    made = client.post("/v1/federations", json=body)
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def register(client: TestClient, **changes: Any) -> int:
    made = client.post("/v1/datasets", json=small_dataset(**changes))
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def stored(client: TestClient, dataset_id: int) -> dict[str, Any]:
    """What a join could have stored: jobs (by id) and the dataset's ledger entries."""
    jobs = [job_id for job_id in range(1, 6)
            if client.get(f"/v1/jobs/{job_id}").status_code == 200]
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report")
    assert report.status_code == 200, report.text
    return {"jobs": jobs, "entries": report.json()["entries"]}


def join(client: TestClient, federation_id: int, dataset_id: int) -> Response:
    return client.post(f"/v1/federations/{federation_id}/join", json={"dataset_id": dataset_id})


# --------------------------------------------------------------------------- declare


def test_an_admin_declares_a_federation_at_its_location(client: TestClient) -> None:
    made = client.post("/v1/federations", json=federation())
    assert made.status_code == 201, made.text
    body = made.json()
    assert made.headers["location"] == f"/v1/federations/{body['id']}"
    assert body["state"] == "declared" and body["report"] is None
    assert body["site_name"] == "clinic-a" and body["schema_sha256"] == CRISIS_SHA
    assert [(s["name"], s["weight"]) for s in body["sites"]] == [("clinic-a", 1.0),
                                                                ("clinic-b", 2.0)]
    assert (body["recipe"]["rounds"], body["recipe"]["local_steps"]) == (ROUNDS, LOCAL_STEPS)
    assert body["recipe"]["batch_size"] is None  # the whole training part by default
    read = client.get(made.headers["location"])
    assert read.status_code == 200 and read.json() == body


@pytest.mark.parametrize("role", [*READERS, "clinician"])
def test_only_an_admin_declares_one(client: TestClient, client_as: ClientAs, role: str) -> None:
    refused = client_as(role).post("/v1/federations", json=federation())
    problem(refused, 403)
    assert client.get("/v1/federations/1").status_code == 404  # nothing was stored


@pytest.mark.parametrize(("changes", "field"), [
    pytest.param({"site_name": None}, "site_name", id="site-without-site-name"),
    pytest.param({"site_name": "clinic-z"}, "site_name", id="site-name-not-a-site"),
    pytest.param({"role": "coordinator"}, "site_name", id="coordinator-with-site-name"),
    pytest.param({"sites": [{"name": "clinic-a"}, {"name": "clinic-a"}]}, "sites",
                 id="duplicate-site-names"),
    pytest.param({"recipe": recipe(min_sites=3)}, "sites", id="min-sites-over-sites"),
    pytest.param({"recipe": recipe(min_sites=1, secure_aggregation=True)},
                 "recipe.secure_aggregation", id="secure-aggregation-of-one-site"),
    pytest.param({"sites": [{"name": "clinic-a", "public_key": KEY}, {"name": "clinic-b"}]},
                 "sites", id="keys-for-some-sites-only"),
    pytest.param({"sites": [{"name": "clinic-a", "public_key": "ssh-ed25519 AAAA"}]},
                 "sites.0.public_key", id="key-not-in-the-one-line-form"),
    pytest.param({"address": "coordinator.example"}, "address", id="address-without-port"),
    pytest.param({"address": "https://coordinator.example:9092"}, "address",
                 id="address-with-scheme"),
    pytest.param({"schema_sha256": "abc123"}, "schema_sha256", id="short-hash"),
    pytest.param({"schema_sha256": CRISIS_SHA.upper()}, "schema_sha256", id="upper-case-hash"),
])
def test_a_bad_declaration_is_a_422_naming_its_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    refused = client.post("/v1/federations", json=federation(**changes))
    error_naming(problem(refused, 422, "validation-error"), field)
    assert client.get("/v1/federations/1").status_code == 404


@pytest.mark.parametrize("rounds", [0, 201])
def test_rounds_out_of_range_give_the_allowed_range(client: TestClient, rounds: int) -> None:
    refused = client.post("/v1/federations", json=federation(recipe=recipe(rounds=rounds)))
    error = error_naming(problem(refused, 422, "validation-error"), "recipe.rounds")
    assert error["allowed"] == "[1, 200]", error


def test_a_coordinator_declares_without_a_site_name(client: TestClient) -> None:
    made = client.post("/v1/federations", json=federation(role="coordinator", site_name=None))
    assert made.status_code == 201, made.text
    assert made.json()["role"] == "coordinator" and made.json()["site_name"] is None


# --------------------------------------------------------------------------- read


@pytest.mark.parametrize("role", READERS)
def test_readers_see_a_federation(client: TestClient, client_as: ClientAs, role: str) -> None:
    federation_id = declare(client, federation())
    read = client_as(role).get(f"/v1/federations/{federation_id}")
    assert read.status_code == 200, read.text
    assert read.json()["id"] == federation_id and read.json()["name"] == "crisis-network"


def test_a_clinician_does_not_see_a_federation(client: TestClient, client_as: ClientAs) -> None:
    federation_id = declare(client, federation())
    problem(client_as("clinician").get(f"/v1/federations/{federation_id}"), 403)


def test_an_unknown_federation_is_a_404(client: TestClient) -> None:
    problem(client.get("/v1/federations/4242"), 404, "federation-not-found")


# --------------------------------------------------------------------------- join


def test_a_steward_joins_and_the_whole_plan_is_reserved(
    client: TestClient, client_as: ClientAs
) -> None:
    federation_id = declare(client, federation())
    dataset_id = register(client)
    joined = join(client_as("data_steward"), federation_id, dataset_id)
    assert joined.status_code == 202, joined.text
    job = joined.json()
    assert joined.headers["location"] == f"/v1/jobs/{job['id']}"
    assert (job["kind"], job["status"], job["dataset_id"]) == ("federated", "queued", dataset_id)
    assert job["privacy"]["steps"] == ROUNDS * LOCAL_STEPS
    assert job["training"]["epochs"] == job["progress"]["epochs"] == ROUNDS
    assert job["privacy"]["target_epsilon"] == TARGET
    assert job["privacy"]["sample_rate"] == 1.0  # the recipe's default: the whole part
    assert job["payload"]["site"] == "clinic-a" and "federation" not in job["training"]
    assert job["payload"]["id"] == federation_id
    followed = client_as("data_scientist").get(joined.headers["location"])
    assert followed.status_code == 200 and followed.json()["status"] == "queued", followed.text
    report = client_as("privacy_officer").get(f"/v1/datasets/{dataset_id}/privacy-report")
    assert report.status_code == 200, report.text
    (entry,) = [e for e in report.json()["entries"] if e["job_id"] == job["id"]]
    assert entry["status"] == "reserved", entry
    assert entry["steps"] == entry["charged_steps"] == ROUNDS * LOCAL_STEPS, entry
    assert entry["noise_multiplier"] == pytest.approx(job["privacy"]["noise_multiplier"])


def test_a_data_scientist_cannot_join(client: TestClient, client_as: ClientAs) -> None:
    federation_id = declare(client, federation())
    dataset_id = register(client)
    before = stored(client, dataset_id)
    problem(join(client_as("data_scientist"), federation_id, dataset_id), 403)
    assert stored(client, dataset_id) == before == NOTHING


def test_a_dataset_of_another_schema_cannot_join(client: TestClient, client_as: ClientAs) -> None:
    federation_id = declare(client, federation(schema_sha256=OTHER_SHA))
    dataset_id = register(client)
    before = stored(client, dataset_id)
    refused = join(client_as("data_steward"), federation_id, dataset_id)
    error_naming(problem(refused, 409, "federation-mismatch"), "dataset_id")
    assert stored(client, dataset_id) == before == NOTHING


def test_a_coordinator_is_not_joined_here(client: TestClient, client_as: ClientAs) -> None:
    federation_id = declare(client, federation(role="coordinator", site_name=None))
    dataset_id = register(client)
    refused = join(client_as("data_steward"), federation_id, dataset_id)
    error_naming(problem(refused, 409, "federation-mismatch"), "federation_id")
    assert stored(client, dataset_id) == NOTHING


def test_a_target_above_the_remaining_budget_is_a_409_like_a_job(
    client: TestClient, client_as: ClientAs
) -> None:
    federation_id = declare(client, federation())
    dataset_id = register(client, privacy_budget={"epsilon": 1.0, "delta": 1e-5})
    before = stored(client, dataset_id)
    body = problem(join(client_as("data_steward"), federation_id, dataset_id), 409,
                   "budget-exceeded")
    assert body["remaining_epsilon"] == pytest.approx(1.0), body
    assert body["job_epsilon"] == pytest.approx(TARGET, rel=0.01), body
    assert body["composed_epsilon_with_job"] > 1.0, body
    largest = body["largest_fitting_target_epsilon"]
    assert largest is not None and 0 < largest <= 1.0, body
    assert stored(client, dataset_id) == before == NOTHING


def test_a_second_join_past_the_budget_is_refused_and_the_first_stays(
    client: TestClient, client_as: ClientAs
) -> None:
    """A join is admitted against what the dataset has already reserved (its filter)."""
    first = declare(client, federation(recipe=recipe(target_epsilon=8.0)))
    second = declare(client, federation(name="other-network",
                                        recipe=recipe(target_epsilon=8.0)))
    dataset_id = register(client)  # budget 10: one part at 8 fits, two do not
    steward = client_as("data_steward")
    assert join(steward, first, dataset_id).status_code == 202
    before = stored(client, dataset_id)
    body = problem(join(steward, second, dataset_id), 409, "budget-exceeded")
    assert 0 < body["remaining_epsilon"] < 8.0, body
    assert stored(client, dataset_id) == before and before["jobs"] == [1]


def test_an_unknown_dataset_or_federation_is_a_404(client: TestClient, client_as: ClientAs) -> None:
    federation_id = declare(client, federation())
    steward = client_as("data_steward")
    error_naming(problem(join(steward, federation_id, 4242), 404, "dataset-not-found"),
                 "dataset_id")
    dataset_id = register(client)
    problem(join(steward, 4242, dataset_id), 404, "federation-not-found")
    assert stored(client, dataset_id) == NOTHING


def test_a_service_takes_part_once_per_federation(client: TestClient,
                                                  client_as: ClientAs) -> None:
    """A second part would be averaged under the same site name and charge patients twice."""
    federation_id = declare(client, federation())
    first, second = register(client), register(client)
    steward = client_as("data_steward")
    assert join(steward, federation_id, first).status_code == 202
    for dataset_id in (first, second):
        before = stored(client, dataset_id)
        refused = join(steward, federation_id, dataset_id)
        error_naming(problem(refused, 409, "federation-already-joined"), "federation_id")
        assert stored(client, dataset_id) == before
