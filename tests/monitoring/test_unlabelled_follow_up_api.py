"""An unlabelled follow-up (features only) through the API: registered with
``"labelled": false``, its CSV sent without the outcome column, a monitoring run releases its
feature histograms alone (sensitivity sqrt(features)) and reports data drift with no
performance; training, retraining, a comparison and a statistics query on its outcome are
refused, naming dataset_id, and charge nothing."""

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.api.scoring_helpers import problem
from tests.conftest import FAST_TRAINING
from tests.flows.test_own_schema_flow import SCHEMA, SEXES, _parquet, _table

pytestmark = pytest.mark.slow

PERIOD = {"period_start": "2026-01-01", "period_end": "2026-06-30"}
BUDGET = {"epsilon": 8, "delta": 1e-5}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _features_csv(n: int, *, outcome: bool = False) -> bytes:
    """A later cohort whose PHQ-9 scores moved up (18 to 27), other patients than training's."""
    rng = np.random.default_rng(11)
    columns: dict[str, Any] = {
        "patient_id": [f"f{i}" for i in range(n)], "phq9": rng.integers(18, 28, n),
        "sex": [SEXES[s] for s in rng.integers(0, 3, n)],
        "bmi": np.round(rng.uniform(15, 60, n), 1), "prior_crisis": rng.integers(0, 2, n)}
    if outcome:
        columns["crisis_30d"] = rng.integers(0, 2, n)
    sink = pa.BufferOutputStream()
    pa_csv.write_csv(pa.table(columns), sink)
    return bytes(sink.getvalue().to_pybytes())


def _trained(client: TestClient, run_worker: Any, dataset_id: int) -> int:
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                        "privacy": {"target_epsilon": 2},
                                        "training": FAST_TRAINING})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    assert done["status"] == "succeeded", done
    return int(done["model_id"])


def _follow_up(client: TestClient, model: int, *, labelled: bool) -> int:
    created = client.post("/v1/datasets", json={
        "name": f"follow-up {labelled}", "source": {"kind": "upload"}, "privacy_budget": BUDGET,
        "follow_up": {"model_id": model, **PERIOD, "labelled": labelled}})
    assert created.status_code == 201, created.text
    assert created.json()["follow_up"] == {"model_id": model, **PERIOD, "labelled": labelled}
    return int(created.json()["id"])


def _put_csv(client: TestClient, dataset_id: int, body: bytes) -> Any:
    return client.put(f"/v1/datasets/{dataset_id}/data", content=body,
                      headers={"Content-Type": "text/csv"})


@pytest.fixture
def unlabelled(client: TestClient, run_worker: Any) -> dict[str, int]:
    """Two models of the clinic's schema and an unlabelled follow-up of the first, ready."""
    training = client.post("/v1/datasets", json={
        "name": "clinic", "source": {"kind": "upload"}, "schema": SCHEMA,
        "privacy_budget": BUDGET})
    assert training.status_code == 201, training.text
    sent = client.put(f"/v1/datasets/{training.json()['id']}/data",
                      content=_parquet(_table(4000)),
                      headers={"Content-Type": "application/vnd.apache.parquet"})
    assert sent.status_code == 200, sent.text
    model = _trained(client, run_worker, training.json()["id"])
    challenger = _trained(client, run_worker, training.json()["id"])
    follow_up = _follow_up(client, model, labelled=False)
    problem(_put_csv(client, follow_up, _features_csv(3000, outcome=True)), 422,
            kind="invalid-table")  # an outcome column: refused, nothing stored
    sent = _put_csv(client, follow_up, _features_csv(3000))
    assert sent.status_code == 200, sent.text
    assert sent.json()["state"] == "ready" and sent.json()["rows"] == 3000
    return {"model": model, "challenger": challenger, "follow_up": follow_up}


def test_a_run_measures_data_drift_without_performance(
        client: TestClient, run_worker: Any, unlabelled: dict[str, int]) -> None:
    model, follow_up = unlabelled["model"], unlabelled["follow_up"]
    queued = client.post(f"/v1/models/{model}/monitoring-runs",
                         json={"dataset_id": follow_up, "privacy": {"target_epsilon": 2.0}})
    assert queued.status_code == 202, queued.text
    assert run_worker() == 1
    run = client.get(queued.headers["Location"]).json()
    assert run["status"] == "succeeded", run
    assert run["performance"] is None and run["roc_auc"] is None and run["roc_auc_ci"] is None
    assert run["fairness"] is None
    assert any("unlabelled follow-up" in note and "no performance" in note
               for note in run["notes"]), run["notes"]
    features = {f["name"]: f for f in run["features"]}
    assert set(features) == {"phq9", "sex", "bmi", "prior_crisis"}
    assert features["phq9"]["verdict"] == "drift", features["phq9"]
    assert run["features"][0]["name"] == "phq9"
    assert run["reference_release_id"] is not None
    # The features' histograms alone: sensitivity sqrt(4), the same noise multiplier (and
    # charge) as any run at this target, so less noise per cell than a labelled run's.
    assert run["privacy"]["l2_sensitivity"] == pytest.approx(2.0)
    entries = client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"]
    assert len(entries) == 1 and entries[0]["job_id"] == run["job_id"]
    assert entries[0]["epsilon"]["pld"] <= 2.0 + 1e-3

    timeline = client.get(f"/v1/models/{model}/monitoring")
    assert [r["id"] for r in timeline.json()["runs"]] == [run["id"]]
    page = client.get(f"/v1/models/{model}/monitoring", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "phq9" in page.text

    problem(client.post(f"/v1/monitoring-runs/{run['id']}/retrain"), 422, field="dataset_id",
            kind="dataset-unlabelled")
    assert len(client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"]) == 1


def test_what_needs_the_outcome_is_refused_and_charges_nothing(
        client: TestClient, unlabelled: dict[str, int]) -> None:
    follow_up = unlabelled["follow_up"]
    problem(client.post("/v1/jobs", json={"dataset_id": follow_up,
                                          "privacy": {"target_epsilon": 1}}),
            422, field="dataset_id", kind="dataset-unlabelled")
    problem(client.post(f"/v1/models/{unlabelled['model']}/comparisons", json={
        "challenger_id": unlabelled["challenger"], "dataset_id": follow_up,
        "privacy": {"target_epsilon": 1.0}}), 422, field="dataset_id", kind="dataset-unlabelled")
    statistics = f"/v1/datasets/{follow_up}/statistics"
    for query in ({"kind": "prevalence"}, {"kind": "count", "by": ["crisis_30d"]},
                  {"kind": "mean", "feature": "crisis_30d"}):
        problem(client.post(statistics, json={"queries": [{"kind": "count"}, query],
                                              "privacy": {"epsilon": 0.5}}),
                422, field="dataset_id", kind="dataset-unlabelled")
    assert client.get(f"/v1/datasets/{follow_up}/privacy-report").json()["entries"] == []
    answered = client.post(statistics, json={"queries": [{"kind": "count", "by": ["sex"]}],
                                             "privacy": {"epsilon": 0.5}})
    assert answered.status_code == 201, answered.text  # its features are answered as usual


def test_registration_rules(client: TestClient, unlabelled: dict[str, int]) -> None:
    model = unlabelled["model"]
    problem(client.post("/v1/datasets", json={
        "name": "generated", "source": {"kind": "synthetic", "n_rows": 1000, "seed": 3},
        "privacy_budget": {"epsilon": 1, "delta": 1e-5},
        "follow_up": {"model_id": model, **PERIOD, "labelled": False}}),
        422, field="follow_up.labelled")
    labelled = _follow_up(client, model, labelled=True)
    refused = problem(_put_csv(client, labelled, _features_csv(3000)), 422,
                      kind="invalid-table")
    assert [(e["column"], e["message"]) for e in refused["errors"]] == [
        ("crisis_30d", "missing column")]
    assert client.get(f"/v1/datasets/{labelled}").json()["state"] == "awaiting_data"
