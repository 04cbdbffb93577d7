"""The statistics contract: POST /v1/datasets/{id}/statistics answers the example request as one
release (201 + Location), charged in the ledger; the release is read back, listed, and shown in
the dataset's privacy report (JSON and page) beside the jobs; roles and idempotency as jobs."""

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import small_dataset
from tests.statistics.helpers import EXAMPLE, ask, report


@pytest.fixture
def dataset_id(client: TestClient) -> int:
    response = client.post("/v1/datasets", json=small_dataset())
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _check_cell(cell: dict[str, Any]) -> None:
    low, high = cell["ci95"]
    assert low <= cell["value"] <= high and cell["standard_error"] > 0


def test_the_example_request_is_one_release(client: TestClient, dataset_id: int) -> None:
    response = ask(client, dataset_id, EXAMPLE)
    assert response.status_code == 201, response.text
    release = response.json()
    assert response.headers["location"] == f"/v1/statistics/{release['id']}"
    assert release["rows"] == 2000 and release["library"].startswith("opendp 0.16")
    privacy = release["privacy"]
    assert privacy["mechanism"] == "gaussian" and privacy["delta"] == 1e-5
    assert privacy["epsilon"] == pytest.approx(0.5, rel=1e-6) and privacy["epsilon"] <= 0.5
    count, prevalence, mean, histogram, grouped = release["answers"]
    assert [a["share"] for a in release["answers"]] == [0.2] * 5
    assert len(count["cells"]) == len(prevalence["cells"]) == len(mean["cells"]) == 1
    assert 0 <= prevalence["cells"][0]["value"] <= 1
    assert 0 <= mean["cells"][0]["value"] <= 50
    assert [n["of"] for n in mean["noise"]][0] == "counts" and len(mean["noise"]) == 2
    assert [c["bin"] for c in histogram["cells"]] == ["0-4", "5-9", "10-14", "15-19", "20-27"]
    groups = [c["group"] for c in grouped["cells"]]
    assert groups[0] == {"sex": "female", "age": "18-29"} and len(groups) == 8
    assert groups[-1] == {"sex": "male", "age": "65-80"}
    for answer in release["answers"]:
        for cell in answer["cells"]:
            _check_cell(cell)
        for noise in answer["noise"]:
            assert noise["distribution"] == "gaussian" and noise["norm"] == "l2"
            assert noise["rho"] == pytest.approx(noise["sensitivity"] ** 2 / (2 * noise["scale"]
                                                                              ** 2))
    assert client.get(response.headers["location"]).json() == release


def test_the_release_is_charged_and_listed_beside_the_jobs(
    client: TestClient, dataset_id: int
) -> None:
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                        "privacy": {"noise_multiplier": 5.0},
                                        "training": {"epochs": 1, "batch_size": 256}})
    assert job.status_code == 202, job.text
    release = ask(client, dataset_id, EXAMPLE).json()
    ledger = report(client, dataset_id)
    job_entry, release_entry = ledger["entries"]
    assert job_entry["job_id"] == job.json()["id"] and job_entry["statistics_release_id"] is None
    assert release_entry["job_id"] is None
    assert release_entry["statistics_release_id"] == release["id"]
    assert release_entry["id"] == release["privacy"]["ledger_entry_id"]
    assert release_entry["mechanism"] == "gaussian" and release_entry["status"] == "committed"
    assert len(release_entry["components"]) == 6  # the mean has two noisy vectors
    assert [p["statistics_release_id"] for p in ledger["timeline"]] == [None, release["id"]]
    (summary,) = ledger["statistics_releases"]
    assert summary["id"] == release["id"] and summary["href"] == f"/v1/statistics/{release['id']}"
    assert summary["queries"][2] == "mean of num_sessions" and summary["cells"] == 16
    assert ledger["timeline"][-1]["composed_epsilon"] == pytest.approx(ledger["spent"]["epsilon"])

    page = client.get(f"/v1/datasets/{dataset_id}/privacy-report", headers={"Accept": "text/html"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script" not in page.text and page.text.count("<table>") >= 3
    assert "Statistics releases" in page.text
    assert page.text.count(f'href="/v1/statistics/{release["id"]}"') == 3  # two tables + list
    assert "charged jobs and statistics releases" in page.text
    verified = client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    assert verified["valid"] and verified["records"] == 4  # budget, job, reserve + commit


def test_releases_are_listed_newest_first(client: TestClient, dataset_id: int) -> None:
    first = ask(client, dataset_id, {"queries": [{"kind": "count"}],
                                     "privacy": {"epsilon": 0.1}}).json()
    second = ask(client, dataset_id, EXAMPLE).json()
    page = client.get(f"/v1/datasets/{dataset_id}/statistics").json()
    assert [r["id"] for r in page["items"]] == [second["id"], first["id"]]
    assert page["total"] == 2
    assert client.get("/v1/statistics/999").status_code == 404


def test_laplace_on_request_is_pure_epsilon(client: TestClient, dataset_id: int) -> None:
    body = {"queries": [{"kind": "count", "by": ["sex"]},
                        {"kind": "mean", "feature": "phq9", "weight": 3}],
            "privacy": {"epsilon": 1.0, "mechanism": "laplace"}}
    release = ask(client, dataset_id, body).json()
    privacy = release["privacy"]
    assert privacy["mechanism"] == "laplace" and privacy["delta"] is None
    assert privacy["epsilon"] == pytest.approx(1.0) and privacy["epsilon"] <= 1.0
    assert "(1, 0)-differential privacy" in privacy["statement"]
    counts, mean = release["answers"]
    assert (counts["share"], mean["share"]) == (0.25, 0.75)
    noise = counts["noise"][0]
    assert noise["distribution"] == "laplace" and noise["norm"] == "l1" and noise["rho"] is None
    assert noise["epsilon"] == pytest.approx(0.25)
    cell = counts["cells"][0]
    assert cell["standard_error"] == pytest.approx(2**0.5 * noise["scale"])
    assert cell["ci95"][1] - cell["value"] == pytest.approx(noise["scale"] * 2.995732, rel=1e-5)
    assert sum(n["epsilon"] for n in mean["noise"]) == pytest.approx(0.75)


def test_an_empty_group_is_answered(client: TestClient, dataset_id: int) -> None:
    body = {"queries": [{"kind": "histogram", "feature": "num_sessions",
                         "bins": [0, 10, 20, 30, 40, 51]},
                        {"kind": "mean", "feature": "gaf",
                         "by": [{"feature": "num_sessions", "bins": [30, 51]}]}],
            "privacy": {"epsilon": 1.0}}
    histogram, mean = ask(client, dataset_id, body).json()["answers"]
    assert [c["bin"] for c in histogram["cells"]] == ["0-9", "10-19", "20-29", "30-39", "40-50"]
    (empty,) = mean["cells"]  # nobody has 30 or more sessions: still one answered cell
    assert empty["group"] == {"num_sessions": "30-50"} and 1 <= empty["value"] <= 100


def test_roles_idempotency_and_audit(client: TestClient, dataset_id: int,
                                     client_as: Callable[[str | None], TestClient]) -> None:
    clinician = ask(client_as("clinician"), dataset_id, EXAMPLE)
    assert clinician.status_code == 403
    officer = client_as("privacy_officer")
    first = ask(officer, dataset_id, EXAMPLE, **{"Idempotency-Key": "k1"})
    again = ask(officer, dataset_id, EXAMPLE, **{"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json() == first.json()
    other = ask(officer, dataset_id, {**EXAMPLE, "privacy": {"epsilon": 0.4}},
                **{"Idempotency-Key": "k1"})
    assert other.status_code == 422
    assert len(report(client, dataset_id)["entries"]) == 1  # charged once
    events = client.get("/v1/audit-log", params={"action": "statistics.released"}).json()
    assert [e["target"] for e in events["items"]] == [f"statistics/{first.json()['id']}"]
