"""Model registry: automatic first activation, explicit activation, rollback, band thresholds,
and scoring that keeps working while the active model changes."""

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, update

from app.core.database import Database
from app.jobs.models import Job
from app.registry.models import ModelActivation, TrainedModel
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT


def active_model(client: TestClient) -> int:
    response = client.post("/v1/risk", json={"features": PATIENT})
    assert response.status_code == 200, response.text
    return int(response.json()["model"]["id"])


def test_first_model_is_active_later_ones_wait(any_client: TestClient, run_worker: Any) -> None:
    first, second, third = train_models(any_client, run_worker, count=3)
    assert active_model(any_client) == first
    listed = any_client.get("/v1/models").json()
    assert listed["active_model_id"] == first
    assert {m["id"]: m["active"] for m in listed["items"]} == {first: True, second: False,
                                                               third: False}
    assert any_client.get("/v1/models/active").json()["id"] == first
    history = any_client.get("/v1/models/activations").json()
    assert [(a["action"], a["model_id"]) for a in history["items"]] == [("auto", first)]

    # An inactive model can still be named explicitly.
    named = any_client.post("/v1/risk", json={"features": PATIENT, "model_id": third})
    assert named.status_code == 200 and named.json()["model"]["id"] == third


@pytest.mark.slow  # trains three models: the full suite runs it
def test_activate_and_roll_back_like_a_stack(any_client: TestClient, run_worker: Any) -> None:
    a, b, c = train_models(any_client, run_worker, count=3)
    activated = any_client.post(f"/v1/models/{b}/activate")
    assert activated.status_code == 200, activated.text
    assert activated.json()["activation"]["previous_model_id"] == a
    assert activated.json()["model"]["active"] is True
    again = any_client.post(f"/v1/models/{b}/activate")
    assert again.status_code == 200 and again.json()["activation"] is None  # nothing written
    assert any_client.post(f"/v1/models/{c}/activate").status_code == 200
    assert active_model(any_client) == c

    rolled = any_client.post("/v1/models/rollback")
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["model"]["id"] == b and rolled.json()["activation"]["action"] == "rollback"
    assert active_model(any_client) == b
    assert any_client.post("/v1/models/rollback").json()["model"]["id"] == a
    assert active_model(any_client) == a
    problem(any_client.post("/v1/models/rollback"), 409, kind="nothing-to-roll-back")

    history = any_client.get("/v1/models/activations").json()["items"]
    assert [(h["action"], h["model_id"]) for h in history] == [
        ("rollback", a), ("rollback", b), ("activate", c), ("activate", b), ("auto", a)]
    assert [h["seq"] for h in history] == [5, 4, 3, 2, 1]


@pytest.mark.slow  # trains three models: the full suite runs it
def test_activation_needs_a_usable_succeeded_model(
    any_client: TestClient, any_db: Database, run_worker: Any, artifact_dir: Path
) -> None:
    first, second, third = train_models(any_client, run_worker, count=3)
    problem(any_client.post("/v1/models/999/activate"), 404, kind="model-not-found")
    with any_db.session_scope() as session:
        job_id = session.get(TrainedModel, second).job_id
        session.execute(update(Job).where(Job.id == job_id).values(status="failed"))
        sha = session.get(TrainedModel, third).artifact_sha256
    problem(any_client.post(f"/v1/models/{second}/activate"), 409, field="model_id",
            kind="model-not-activatable")
    (artifact_dir / f"{sha}.pt").write_bytes(b"tampered")
    problem(any_client.post(f"/v1/models/{third}/activate"), 409, field="model_id",
            kind="model-unavailable")
    problem(any_client.post("/v1/risk", json={"features": PATIENT, "model_id": third}), 409,
            field="model_id", kind="model-unavailable")
    assert active_model(any_client) == first  # nothing changed
    assert any_client.get("/v1/models/activations").json()["total"] == 1


def test_no_active_model_is_409(any_client: TestClient, any_db: Database,
                                run_worker: Any) -> None:
    train_models(any_client, run_worker)
    with any_db.session_scope() as session:
        session.execute(delete(ModelActivation))
    problem(any_client.post("/v1/risk", json={"features": PATIENT}), 409, field="model_id",
            kind="no-active-model")
    problem(any_client.get("/v1/models/active"), 409, kind="no-active-model")


def test_band_thresholds_change_the_band(any_client: TestClient, run_worker: Any) -> None:
    (model_id,) = train_models(any_client, run_worker)
    before = any_client.post("/v1/risk", json={"features": PATIENT}).json()
    assert before["band_thresholds"] == {"low_medium": 0.05, "medium_high": 0.2}
    p = before["probability"]
    above = (1 - p) / 3  # room above p, split in three
    # Thresholds that put this patient in each band in turn.
    for band, thresholds in (
        ("low", {"low_medium": p + above, "medium_high": p + 2 * above}),
        ("medium", {"low_medium": p / 2, "medium_high": p + above}),
        ("high", {"low_medium": p / 3, "medium_high": p / 2}),
    ):
        put = any_client.put(f"/v1/models/{model_id}/band-thresholds", json=thresholds)
        assert put.status_code == 200, put.text
        assert put.json()["band_thresholds"] == thresholds
        after = any_client.post("/v1/risk", json={"features": PATIENT}).json()
        assert after["band"] == band and after["band_thresholds"] == thresholds
        assert after["probability"] == before["probability"]


def test_invalid_band_thresholds_write_nothing(client: TestClient, run_worker: Any) -> None:
    (model_id,) = train_models(client, run_worker)
    path = f"/v1/models/{model_id}/band-thresholds"
    cases = [
        ({"low_medium": 0.2, "medium_high": 0.1}, "medium_high", "(0.2, 1)"),
        ({"low_medium": 0.1, "medium_high": 0.1}, "medium_high", "(0.1, 1)"),
        ({"low_medium": 0, "medium_high": 0.1}, "low_medium", "(0, 1)"),
        ({"low_medium": 0.1, "medium_high": 1}, "medium_high", "(0, 1)"),
        ({"low_medium": -0.1, "medium_high": 0.5}, "low_medium", "(0, 1)"),
        ({"low_medium": "0.1", "medium_high": 0.5}, "low_medium", None),
        ({"low_medium": True, "medium_high": 0.5}, "low_medium", None),
        ({"medium_high": 0.5}, "low_medium", None),
        ({"low_medium": 0.1, "medium_high": 0.5, "extra": 1}, "extra", None),
    ]
    for body, field, allowed in cases:
        problem(client.put(path, json=body), 422, field=field, allowed=allowed)
    nan = '{"low_medium": NaN, "medium_high": 0.5}'
    problem(client.put(path, content=nan, headers={"content-type": "application/json"}), 422,
            field="low_medium")
    problem(client.put("/v1/models/999/band-thresholds",
                       json={"low_medium": 0.1, "medium_high": 0.5}), 404,
            kind="model-not-found")
    assert client.get(f"/v1/models/{model_id}").json()["band_thresholds"] == {
        "low_medium": 0.05, "medium_high": 0.2}


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_scoring_keeps_working_while_activating(any_client: TestClient,
                                                run_worker: Any) -> None:
    first, second = train_models(any_client, run_worker, count=2)
    stop = threading.Event()
    seen: list[int] = []
    failures: list[str] = []

    def score() -> None:
        while not stop.is_set():
            single = any_client.post("/v1/risk", json={"features": PATIENT})
            batch = any_client.post("/v1/risk/batch",
                                    json={"patients": [{"features": PATIENT}] * 20})
            for response in (single, batch):
                if response.status_code != 200:
                    failures.append(response.text)
            if single.status_code == 200:
                seen.append(single.json()["model"]["id"])

    scorers = [threading.Thread(target=score) for _ in range(3)]
    for thread in scorers:
        thread.start()
    try:
        deadline = time.monotonic() + 3
        switches = 0
        while time.monotonic() < deadline:
            for model_id in (second, first):
                response = any_client.post(f"/v1/models/{model_id}/activate")
                assert response.status_code == 200, response.text
                switches += 1
            rolled = any_client.post("/v1/models/rollback")
            assert rolled.status_code == 200, rolled.text
    finally:
        stop.set()
        for thread in scorers:
            thread.join(timeout=30)
    assert not failures, failures[:3]
    assert switches >= 4 and len(seen) >= 10
    assert set(seen) <= {first, second}
