"""A training job's hyper-parameter search through the API: validation, the one ledger entry
(charged as dp-accounting's RepeatAndSelectDpEvent, its tail part of delta), the M runs
executed whatever K, K = 0, the 409, and a mean too heavy-tailed for the runs' cap."""

import math
from typing import Any

import pytest
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import RdpAccountant
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.core.database import get_database
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy import accounting, events, selection
from tests.conftest import small_dataset
from worker import search as worker_search

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

TRAINING = {"epochs": 2, "batch_size": 256}
GRID = [{"learning_rate": 0.05}, {"learning_rate": 0.3, "optimizer": "sgd"},
        {"model": "mlp", "hidden_units": 8}]


def _search(**overrides: Any) -> dict[str, Any]:
    return {"candidates": GRID, "runs": "truncated_negative_binomial", "mean_runs": 2.0,
            **overrides}


def _body(dataset_id: int, target: float = 3.0, **search: Any) -> dict[str, Any]:
    return {"dataset_id": dataset_id, "privacy": {"target_epsilon": target},
            "training": TRAINING, "search": _search(**search)}


def _dataset(client: TestClient, epsilon: float = 10.0) -> dict[str, Any]:
    response = client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": epsilon, "delta": 1e-5}))
    assert response.status_code == 201, response.text
    return dict(response.json())


def _entry(job_id: int) -> LedgerEntry:
    with get_database().session_scope() as session:
        entry = session.scalar(select(LedgerEntry).where(LedgerEntry.job_id == job_id))
        assert entry is not None
        session.expunge(entry)
        return entry


def _named(response: Any, field: str) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    errors = response.json().get("errors") or [response.json()]
    named = [e for e in errors if e.get("field") == field]
    assert named, f"no error names {field!r}: {errors}"
    return dict(named[0])


@pytest.mark.parametrize(("search", "field", "allowed"), [
    ({"mean_runs": 0.5}, "search.mean_runs", "[1, 20]"),
    ({"mean_runs": 21}, "search.mean_runs", "[1, 20]"),
    ({"candidates": []}, "search.candidates", "[1, 32] candidates"),
    ({"candidates": [{"learning_rate": 0.1}] * 33}, "search.candidates", "[1, 32] candidates"),
    ({"candidates": [{"learning_rate": 11}]}, "search.candidates.0.learning_rate", "(0, 10]"),
    ({"candidates": [{"hidden_units": 1}]}, "search.candidates.0.hidden_units", "[2, 256]"),
    ({"shape": -1}, "search.shape", "[0, 10]"),
    ({"shape": 11}, "search.shape", "[0, 10]"),
])
def test_out_of_range_search_fields_are_a_422_naming_the_field_and_range(
    client: TestClient, search: dict[str, Any], field: str, allowed: str
) -> None:
    dataset = _dataset(client)
    named = _named(client.post("/v1/jobs", json=_body(dataset["id"], **search)), field)
    assert named.get("allowed") == allowed, named


@pytest.mark.parametrize(("search", "field", "words"), [
    ({"candidates": [{"batch_size": 64}]}, "search.candidates.0", "batch_size"),
    ({"candidates": [{"epochs": 5, "learning_rate": 0.1}]}, "search.candidates.0", "epochs"),
    ({"candidates": [{"model": "forest"}]}, "search.candidates.0.model", "logistic"),
    ({"runs": "geometric"}, "search.runs", "poisson"),
    ({"runs": "poisson", "shape": 1.0}, "search", "shape"),
])
def test_a_candidate_or_distribution_the_search_cannot_run_is_a_422_in_words(
    client: TestClient, search: dict[str, Any], field: str, words: str
) -> None:
    dataset = _dataset(client)
    named = _named(client.post("/v1/jobs", json=_body(dataset["id"], **search)), field)
    assert words in str(named), named


def test_a_non_private_search_is_refused(client: TestClient) -> None:
    dataset = _dataset(client)
    body = _body(dataset["id"])
    body["privacy"] = {"noise_multiplier": 0}
    _named(client.post("/v1/jobs", json=body), "privacy.noise_multiplier")


@pytest.mark.parametrize(("runs", "shape"), [("poisson", math.inf),
                                             ("truncated_negative_binomial", 1.0),
                                             ("truncated_negative_binomial", 0.0)])
def test_the_ledger_charges_one_entry_equal_to_dp_accountings_repeat_and_select(
    client: TestClient, runs: str, shape: float
) -> None:
    dataset = _dataset(client)
    extra = {} if runs == "poisson" else {"shape": shape}
    response = client.post("/v1/jobs", json=_body(dataset["id"], runs=runs, **extra))
    assert response.status_code == 202, response.text
    job = response.json()
    privacy = job["privacy"]
    entry = _entry(job["id"])
    assert entry.mechanism == events.REPEAT_AND_SELECT and entry.steps == 1
    independent = RepeatAndSelectDpEvent(
        events.dpsgd(privacy["noise_multiplier"], privacy["sample_rate"], privacy["steps"]),
        2.0, shape)
    assert ledger_spend.recorded_event(entry) == independent
    theirs = RdpAccountant()
    theirs.compose(independent)
    # at the delta the tail leaves: the job's stated (epsilon, delta) covers K > M
    rest = (1 - accounting.SELECTION_TAIL_SHARE) * privacy["delta"]
    expected = theirs.get_epsilon(rest)
    assert entry.epsilon_rdp == pytest.approx(expected, rel=1e-9)
    assert entry.epsilon_rdp >= expected * (1 - 1e-12)  # never below
    assert entry.epsilon_prv == entry.epsilon_rdp  # PLD has none: the RDP figure, said so
    order = dataset["privacy_budget"]["filter_order"]
    at = list(theirs._orders).index(order)  # noqa: SLF001
    assert ledger_spend.spent_rdp([entry], order) == pytest.approx(theirs._rdp[at], rel=1e-12)  # noqa: SLF001
    assert privacy["epsilon_planned"]["pld"] == pytest.approx(expected, rel=1e-9)
    assert expected <= 3.0
    assert job["search"]["total_epsilon"] == pytest.approx(expected, rel=1e-9)
    assert job["search"]["run_epsilon"] < expected
    assert "search" not in job["training"]
    # sized against its filters too: the dataset's budget, and its patients' (the seed's
    # space, made with the same budget)
    budget = (dataset["privacy_budget"]["epsilon"], dataset["privacy_budget"]["delta"])
    executed = selection.executed_runs(independent, privacy["delta"], (budget, budget))
    assert job["search"]["executed_runs"] == executed.runs >= 1
    assert job["search"]["tail_probability"] == pytest.approx(executed.tail_probability)
    assert entry.tail_probability == job["search"]["tail_probability"]  # the filters' part
    assert executed.runs >= selection.executed_runs(independent, privacy["delta"]).runs
    assert rest + job["search"]["tail_delta"] <= privacy["delta"]


def test_a_search_job_releases_its_best_run_only(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scores: list[tuple[int, float]] = []
    real = worker_search.one_run

    def spy(*args: Any, **kwargs: Any) -> worker_search.Run:
        run = real(*args, **kwargs)
        scores.append((run.candidate, run.score))
        return run

    monkeypatch.setattr(worker_search, "one_run", spy)
    monkeypatch.setattr(selection, "draw_runs", lambda *args: 4)
    dataset = _dataset(client)
    job_id = client.post("/v1/jobs", json=_body(dataset["id"], mean_runs=1.2)).json()["id"]
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job
    executed = job["search"]["executed_runs"]
    assert executed > 4 and len(scores) == executed  # M runs whatever K
    found = job["metrics"]["search"]
    best = min(scores[:4], key=lambda s: s[1])  # the best of the first K only
    assert found["executed_runs"] == executed
    assert found["tail_probability"] == job["search"]["tail_probability"]
    assert set(found) == {"chosen_candidate", "chosen", "score", "chosen_score",
                          "executed_runs", "tail_probability", "tail_delta", "note"}
    assert found["chosen_score"] == pytest.approx(best[1])
    assert found["chosen_candidate"] == best[0]
    assert found["chosen"] == job["search"]["candidates"][best[0]]
    assert found["score"] == worker_search.SCORE
    model = client.get(f"/v1/models/{job['model_id']}").json()
    assert model["privacy"]["epsilon"] == pytest.approx(job["search"]["total_epsilon"])
    assert model["privacy"]["accountant"] == "rdp"  # PLD has no repeat-and-select figure
    assert "RDP accountant" in model["privacy"]["statement"]
    # Nothing counts the runs: progress is the search's start and end.
    report = client.get(f"/v1/jobs/{job_id}/privacy-report").json()
    assert [e["epoch"] for e in report["epsilon_per_epoch"]] == [0, TRAINING["epochs"]]
    assert report["search"]["total_epsilon"] == job["search"]["total_epsilon"]
    assert "repeat-and-select" in report["mechanism"]
    assert "number of runs is not" in report["statement"]
    assert "RDP accountant" in report["statement"]
    entries = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()["entries"]
    assert entries[0]["search"] == {"runs": "truncated_negative_binomial", "mean_runs": 1.2,
                                    "shape": 1.0, "run_steps": job["privacy"]["steps"]}
    assert _entry(job_id).status == "committed"


def test_a_poisson_search_that_draws_no_run_fails_after_its_m_runs_and_keeps_its_charge(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []
    real = worker_search.one_run

    def spy(*args: Any, **kwargs: Any) -> worker_search.Run:
        ran.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(worker_search, "one_run", spy)
    monkeypatch.setattr(selection, "draw_runs", lambda *args: 0)
    dataset = _dataset(client)
    job_id = client.post("/v1/jobs", json=_body(dataset["id"], runs="poisson",
                                                mean_runs=1.0)).json()["id"]
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert len(ran) == job["search"]["executed_runs"]  # as long as any other search
    assert job["error"]["code"] == worker_search.NO_RUNS
    assert job["model_id"] is None and job["metrics"] is None
    entry = _entry(job_id)
    assert entry.status == "committed" and entry.charged_steps == entry.steps == 1
    spent = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()["spent"]
    assert spent["epsilon"] == pytest.approx(entry.epsilon_rdp, rel=1e-6)


def test_a_search_that_does_not_fit_is_a_409_whose_largest_target_fits(
    client: TestClient,
) -> None:
    dataset = _dataset(client, epsilon=3.0)
    assert client.post("/v1/jobs", json=_body(dataset["id"], target=2.0)).status_code == 202
    refused = client.post("/v1/jobs", json=_body(dataset["id"], target=2.0))
    assert refused.status_code == 409, refused.text
    body = refused.json()
    largest = body["largest_fitting_target_epsilon"]
    assert largest is not None and 0 < largest < 2.0, body
    assert body["filter"]["kind"] == "renyi"
    assert client.post("/v1/jobs", json=_body(dataset["id"], target=largest)).status_code == 202
    assert client.post("/v1/jobs", json=_body(dataset["id"], target=0.05)).status_code in (409,
                                                                                           422)


def test_a_mean_too_heavy_tailed_for_the_runs_cap_is_a_422_naming_the_mean_that_fits(
    client: TestClient,
) -> None:
    dataset = _dataset(client)
    refused = client.post("/v1/jobs", json=_body(dataset["id"], mean_runs=20.0, shape=0.0))
    named = _named(refused, "search.mean_runs")
    assert f"more than {selection.MAX_EXECUTED_RUNS} runs" in refused.text, refused.text
    allowed = named["allowed"]
    assert allowed.startswith("[1, ") and "delta" in allowed, named
    assert 1.0 <= float(allowed[len("[1, "):allowed.index("]")]) < 20.0  # fits: test_selection
