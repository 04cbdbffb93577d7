"""Scoring's per-process memory of the resolved model (``app.scoring.model_cache``): changes
committed here are seen at once, changes committed elsewhere within the TTL, errors never stick,
and the single-patient answer is written exactly as its response model would write it."""

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.database import Database
from app.registry import service as registry_service
from app.registry.models import ModelActivation, TrainedModel
from app.scoring import model_cache
from app.scoring.schemas import RiskResult
from tests.api.scoring_helpers import problem, train_models
from tests.conftest import PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow


def scored_by(client: TestClient) -> int:
    response = client.post("/v1/risk", json={"features": PATIENT})
    assert response.status_code == 200, response.text
    return int(response.json()["model"]["id"])


def two_models_first_remembered(client: TestClient, run_worker: Any,
                                monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Train two models; the first (auto-activated) has scored and is remembered for an hour."""
    first, second = train_models(client, run_worker, count=2)
    monkeypatch.setattr(model_cache, "TTL_SECONDS", 3600.0)
    assert scored_by(client) == first
    return first, second


def test_a_change_committed_elsewhere_is_seen_after_the_ttl(
    any_client: TestClient, any_db: Database, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_models_first_remembered(any_client, run_worker, monkeypatch)
    # Another process activates ``second``: a plain commit, without this process's flag.
    with any_db.session_scope() as session:
        session.add(ModelActivation(seq=2, model_id=second, previous_model_id=first,
                                    action="activate"))
    assert scored_by(any_client) == first  # remembered, as documented, until the TTL ends
    monkeypatch.setattr(model_cache, "TTL_SECONDS", 0.0)
    assert scored_by(any_client) == second


def test_changes_committed_here_are_seen_at_once(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_models_first_remembered(client, run_worker, monkeypatch)
    assert client.post(f"/v1/models/{second}/activate").status_code == 200
    assert scored_by(client) == second
    thresholds = {"low_medium": 0.001, "medium_high": 0.002}
    assert client.put(f"/v1/models/{second}/band-thresholds", json=thresholds).status_code == 200
    after = client.post("/v1/risk", json={"features": PATIENT}).json()
    assert after["band_thresholds"] == thresholds and after["band"] == "high"
    assert client.post("/v1/models/rollback").status_code == 200
    assert scored_by(client) == first


def test_a_failed_change_forgets_nothing(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, second = two_models_first_remembered(client, run_worker, monkeypatch)
    generation = registry_service.scoring_models.generation
    problem(client.put(f"/v1/models/{second}/band-thresholds",
                       json={"low_medium": 0.5, "medium_high": 0.1}), 422, field="medium_high")
    assert registry_service.scoring_models.generation == generation


def test_a_lookup_that_races_a_commit_stores_nothing(
    client: TestClient, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (model_id,) = train_models(client, run_worker)
    registry_service.scoring_models.forget_all()
    real_resolve = registry_service.resolve

    def resolve_then_commit_elsewhere(**kwargs: Any) -> TrainedModel:
        model = real_resolve(**kwargs)
        # A registry change commits while this lookup runs.
        registry_service.scoring_models.forget_all()
        return model

    monkeypatch.setattr(registry_service, "resolve", resolve_then_commit_elsewhere)
    assert model_cache.resolve(None).id == model_id
    assert len(registry_service.scoring_models) == 0  # possibly stale: not remembered
    monkeypatch.setattr(registry_service, "resolve", real_resolve)
    assert model_cache.resolve(None).id == model_id
    assert len(registry_service.scoring_models) == 1


def test_errors_are_not_remembered(client: TestClient, run_worker: Any) -> None:
    problem(client.post("/v1/risk", json={"features": PATIENT}), 404, field="model_id")
    problem(client.post("/v1/risk", json={"features": PATIENT, "model_id": 1}), 404,
            field="model_id")
    (model_id,) = train_models(client, run_worker)
    assert scored_by(client) == model_id
    named = client.post("/v1/risk", json={"features": PATIENT, "model_id": model_id})
    assert named.status_code == 200 and named.json()["model"]["id"] == model_id


def test_single_answer_is_exactly_its_response_model(client: TestClient,
                                                     run_worker: Any) -> None:
    """The route writes the typed answer's JSON itself: it must be what RiskResult gives."""
    train_models(client, run_worker)
    response = client.post("/v1/risk", json={"features": PATIENT})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert RiskResult.model_validate(document).model_dump(mode="json", by_alias=True) == document
