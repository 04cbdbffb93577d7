"""Size floors through the API: a 2-row or 30-row upload is refused (422)
and cannot train, a 30-row table stored before the floor existed is refused at submission
(422) before the ledger is touched, and a table just above the floor trains and says, in its
statement, model card and metrics, what it could not release."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.database import Database
from app.core.settings import settings
from app.datasets import claims, uploads
from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import encoder_for
from app.jobs import size_floor
from tests.api.scoring_helpers import problem
from tests.datasets.test_upload_api import SCHEMA, _csv, _put, _register, _rows

INPUTS = encoder_for(DatasetSchema.model_validate(SCHEMA)).n_inputs


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _ledger(client: TestClient, dataset_id: int) -> tuple[Any, ...]:
    """What a charge would change: the entries, the remaining budget, the chain's records."""
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    verified = client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    return report["entries"], report["remaining"]["epsilon"], verified["records"]


def _both_outcomes(rows: int, seed: int) -> bytes:
    """A table of ``rows`` rows with both outcomes (a single class is refused for itself)."""
    table = _rows(rows, seed=seed)
    table[0], table[1] = table[0][:-1] + "0", table[1][:-1] + "1"
    return _csv(table)


def _job(dataset_id: int, privacy: dict[str, Any]) -> dict[str, Any]:
    return {"dataset_id": dataset_id, "privacy": privacy}


PRIVACY = [{"target_epsilon": e} for e in (0.1, 1.0, 3.0, 100.0)] + [{"noise_multiplier": 1.0}]


@pytest.mark.parametrize("rows", [2, 30])
def test_a_tiny_upload_is_refused_and_cannot_train(client: TestClient, _data_dir: Path,
                                                   rows: int) -> None:
    created = _register(client)
    before = _ledger(client, created["id"])
    body = problem(_put(client, created["id"], _both_outcomes(rows, seed=rows)), 422,
                   field="body", kind="dataset-too-small")
    assert body["rows"] == rows
    assert body["minimum_rows"] == size_floor.upload_floor(INPUTS) > rows
    assert f"{rows} rows" in body["detail"]
    assert client.get(f"/v1/datasets/{created['id']}").json()["state"] == "awaiting_data"
    for privacy in PRIVACY:
        problem(client.post("/v1/jobs", json=_job(created["id"], privacy)), 409,
                field="dataset_id")
    assert _ledger(client, created["id"]) == before
    assert client.get(f"/v1/jobs?dataset_id={created['id']}").json()["total"] == 0
    assert not [p for p in _data_dir.iterdir() if not p.name.startswith(".")]


def test_a_small_table_stored_before_the_floor_is_refused_before_any_charge(
    client: TestClient, db: Database, tmp_path: Path
) -> None:
    """30 rows kept by the datasets domain itself (as before the floor existed): every job on
    them is a 422 naming the dataset, its rows and the minimum, and nothing is reserved."""
    created = _register(client)
    body = tmp_path / "thirty.csv"
    body.write_bytes(_both_outcomes(30, seed=3))
    with db.session_scope() as session:
        claimed = claims.claim(session=session, dataset_id=created["id"])
    received = uploads.receive(claimed=claimed, path=body, media_type="text/csv")
    with db.session_scope() as session:
        uploads.accept(session=session, received=received)
    dataset = client.get(f"/v1/datasets/{created['id']}").json()
    assert dataset["state"] == "ready" and dataset["rows"] == 30
    before = _ledger(client, created["id"])
    for privacy in PRIVACY:
        refused = problem(client.post("/v1/jobs", json=_job(created["id"], privacy)), 422,
                          field="dataset_id", kind="dataset-too-small")
        assert refused["rows"] == 30 and "30 rows" in refused["detail"]
        if "calibration_rows" in refused:  # a held-out part below 10 rows (most splits)
            assert refused["minimum_rows"] == size_floor.HELD_OUT_MIN_ROWS > min(
                refused["calibration_rows"], refused["evaluation_rows"])
        else:  # both held-out parts reached 10: at most 10 training rows are left
            assert refused["minimum_training_rows"] == 10 * (INPUTS + 1)
            assert refused["training_rows"] <= 10
    assert _ledger(client, created["id"]) == before
    assert client.get(f"/v1/jobs?dataset_id={created['id']}").json()["total"] == 0


def test_a_table_just_above_the_floor_trains_and_says_what_it_could_not_release(
    client: TestClient, run_worker: Any
) -> None:
    """200 rows at epsilon 1: above the job's floor (the training part's 10 (inputs + 1)
    rows, each held-out part's 10), below what a meaningful calibration and evaluation need at
    that noise. The model is not calibrated, and every place that describes it says so."""
    created = _register(client)
    assert _put(client, created["id"], _csv(_rows(200, seed=8))).status_code == 200
    dataset = client.get(f"/v1/datasets/{created['id']}").json()
    submitted = client.post("/v1/jobs", json=_job(created["id"], {"target_epsilon": 1.0}))
    assert submitted.status_code == 202, submitted.text
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{submitted.json()['id']}").json()
    assert job["status"] == "succeeded", job

    metrics = job["metrics"]
    warnings = {w["release"]: w for w in metrics["held_out_warnings"]}
    assert set(warnings) == {"calibration", "evaluation"}
    assert warnings["calibration"]["rows"] == dataset["calibration_rows"]
    assert warnings["calibration"]["minimum_rows"] > dataset["calibration_rows"]
    assert warnings["calibration"]["released"] is False
    assert warnings["evaluation"]["rows"] == dataset["evaluation_rows"]
    assert warnings["evaluation"]["released"] is True
    calibration = metrics["calibration"]
    assert calibration["method"] == size_floor.CALIBRATION_WITHHELD
    assert calibration["noisy_counts"] == [] and calibration["slope"] == 1.0

    model = client.get(f"/v1/models/{job['model_id']}").json()
    statement = model["privacy"]["statement"]
    assert model["privacy"]["calibrated"] is False
    assert "calibrated on a held-out part" not in statement
    assert "Warning: Its probabilities were not calibrated on held-out data" in statement
    assert f"{dataset['calibration_rows']} rows are below" in statement

    report = client.get(f"/v1/jobs/{job['id']}/privacy-report").json()
    assert "Calibration: none was released" in report["statement"]
    assert "Platt scaling" not in report["statement"]
    assert "Warning: Its probabilities were not calibrated" in report["statement"]
    assert "Its held-out metrics are mostly noise" in report["statement"]
    assert "Calibration and evaluation are DP releases" not in report["statement"]
    assert not any("calibration" in c for c in report["coverage"]["covers"])
    caveats = report["model_card"]["caveats"]
    assert caveats[0].startswith("Warning: Its probabilities were not calibrated")
    assert caveats[1].startswith("Warning: Its held-out metrics are mostly noise")
    page = client.get(f"/v1/jobs/{job['id']}/privacy-report", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "not calibrated on held-out data" in page.text
