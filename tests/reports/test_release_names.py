"""Every ledger entry of a dataset report names its release in words and by link: a training
job, a search with its candidates, a statistics release, a monitoring run of a model, a
champion/challenger comparison and a clinic's part in a federation. Each link answers a
privacy officer, every reader of the report reads the same names, and the page shows the words
as that link."""

import html
import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from app.jobs.models import TRAIN
from app.reports import release_names
from tests.conftest import FAST_TRAINING, small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

ClientAs = Callable[[str | None], TestClient]
GRID = [{"learning_rate": 0.05}, {"learning_rate": 0.3, "optimizer": "sgd"},
        {"model": "mlp", "hidden_units": 8}]
FEDERATION = {
    "name": "crisis-network", "role": "site", "address": "coordinator.example:9092",
    "schema_sha256": schema_hash(BUILT_IN_SCHEMA),
    "recipe": {"rounds": 3, "local_steps": 4, "target_epsilon": 2.0},
    "sites": [{"name": "clinic-a"}, {"name": "clinic-b"}], "site_name": "clinic-a",
}


def _created(response: Any, status: int = 202) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json())


def _job(client: TestClient, dataset_id: int, **extra: Any) -> int:
    body = {"dataset_id": dataset_id, "privacy": {"target_epsilon": 1.0},
            "training": FAST_TRAINING, **extra}
    return int(_created(client.post("/v1/jobs", json=body))["id"])


def _releases(client: TestClient, client_as: ClientAs, run_worker: Any) -> dict[str, Any]:
    """Two trained models on one dataset, then a search, a statistics release, a monitoring
    run and a comparison on a follow-up, and a clinic's part in a federation (queued)."""
    train = _created(client.post("/v1/datasets", json=small_dataset()), 201)["id"]
    trained = [_job(client, train), _job(client, train)]
    assert run_worker() == 2
    champion, challenger = (client.get(f"/v1/jobs/{j}").json()["model_id"] for j in trained)
    search = _job(client, train, search={"candidates": GRID, "mean_runs": 2.0,
                                         "runs": "truncated_negative_binomial"},
                  privacy={"target_epsilon": 2.0})
    statistics = _created(client.post(f"/v1/datasets/{train}/statistics", json={
        "queries": [{"kind": "count"}], "privacy": {"epsilon": 0.5}}), 201)["id"]
    follow = _created(client.post("/v1/datasets", json=small_dataset(follow_up={
        "model_id": champion, "period_start": "2026-01-01", "period_end": "2026-06-30"})),
        201)["id"]
    run = _created(client.post(f"/v1/models/{champion}/monitoring-runs", json={
        "dataset_id": follow, "privacy": {"target_epsilon": 0.5}}))["id"]
    comparison = _created(client.post(f"/v1/models/{champion}/comparisons", json={
        "challenger_id": challenger, "dataset_id": follow,
        "privacy": {"target_epsilon": 0.5}}))["id"]
    site = _created(client.post("/v1/datasets", json=small_dataset()), 201)["id"]
    federation = _created(client.post("/v1/federations", json=FEDERATION), 201)["id"]
    part = _created(client_as("data_steward").post(
        f"/v1/federations/{federation}/join", json={"dataset_id": site}))["id"]
    return {"datasets": (train, follow, site), "trained": trained, "search": search,
            "statistics": statistics, "run": run, "comparison": comparison,
            "federation": federation, "part": part, "models": (champion, challenger)}


@pytest.fixture
def made(client: TestClient, client_as: ClientAs, run_worker: Any) -> dict[str, Any]:
    return _releases(client, client_as, run_worker)


def _reports(client: TestClient, made: dict[str, Any]) -> list[dict[str, Any]]:
    return [_created(client.get(f"/v1/datasets/{d}/privacy-report"), 200)
            for d in made["datasets"]]


def test_every_entry_names_its_release_and_links_to_it(
        client: TestClient, client_as: ClientAs, made: dict[str, Any]) -> None:
    officer = client_as("privacy_officer")
    reports = _reports(officer, made)
    entries = [e for report in reports for e in report["entries"]]
    by_kind: dict[str, list[str]] = {}
    for entry in entries:
        release = entry["release"]
        by_kind.setdefault(release["kind"], []).append(release["words"])
        owner = entry["job_id"] or entry["statistics_release_id"]
        assert str(owner) in release["words"] or release["kind"] == "monitoring", release
        assert officer.get(release["href"]).status_code == 200, release
    champion, challenger = made["models"]
    assert sorted(by_kind["training"]) == sorted(f"training job {j}" for j in made["trained"])
    (search,) = by_kind["search"]
    assert search.startswith(f"hyper-parameter search {made['search']} (3 candidates planned")
    assert f"statistics release {made['statistics']}" in by_kind["statistics"]
    assert by_kind["monitoring"] == [f"monitoring run {made['run']} of model {champion}"]
    assert by_kind["comparison"] == [
        f"champion/challenger comparison {made['comparison']} of models {champion} "
        f"(champion) and {challenger} (challenger)"]
    assert by_kind["federation"] == [
        f"federated training job {made['part']}: this clinic's part in federation "
        f"{made['federation']} (3 rounds planned)"]
    for report in reports:  # the timeline names each charged entry's release the same way
        named = {e["id"]: e["release"] for e in report["entries"]}
        assert all(p["release"] == named[p["entry_id"]] for p in report["timeline"])
    steward = _reports(client_as("data_steward"), made)  # public facts: one name for all
    assert [e["release"] for r in steward for e in r["entries"]] == [
        e["release"] for e in entries]


def test_the_page_shows_each_release_as_its_link(
        client: TestClient, client_as: ClientAs, made: dict[str, Any]) -> None:
    officer = client_as("privacy_officer")
    for dataset_id, report in zip(made["datasets"], _reports(officer, made), strict=True):
        page = officer.get(f"/v1/datasets/{dataset_id}/privacy-report",
                           headers={"Accept": "text/html"})
        assert page.status_code == 200, page.text
        links = {(html.unescape(href), html.unescape(text))
                 for href, text in re.findall(r'<a href="([^"]+)">([^<]+)</a>', page.text)}
        for entry in report["entries"]:
            release = entry["release"]
            assert (release["href"], release["words"]) in links, release


def test_a_search_is_named_by_its_public_plan_alone() -> None:
    """The runs a search executes and the K it drew stay out of its name."""
    plan = {"candidates": [{}, {}, {}, {}], "runs": "poisson", "mean_runs": 2.5, "shape": None,
            "executed_runs": 17, "tail_probability": 1e-9}
    named = release_names.job_name(release_names.JobFacts(9, TRAIN, {"search": plan}))
    assert (named.kind, named.href) == ("search", "/v1/jobs/9/privacy-report")
    assert named.words == ("hyper-parameter search 9 (4 candidates planned, a random number of "
                           "runs of mean 2.5, the best released)")
