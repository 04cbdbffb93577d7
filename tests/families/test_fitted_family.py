"""A family that is not trained by DP-SGD, added through the trainer seam in this one file:
its family (the plan of its one release, from public quantities), its trainer (the fit, one
Gaussian release of bounded sufficient statistics) and their registration. It trains through
``POST /v1/jobs``, its ledger entry is its event with dp-accounting's epsilon, it scores with
reasons, and what only DP-SGD can do refuses it at submission. docs/families.md walks
through it."""

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from dp_accounting.dp_event import GaussianDpEvent, SelfComposedDpEvent
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant
from fastapi.testclient import TestClient
from torch import nn

from app.core.database import Database
from app.datasets.models import Dataset
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from app.families import (
    Family,
    PlanRefused,
    ReleasePlan,
    ReleaseRequest,
    create_family,
    register_family,
    unregister_family,
)
from app.federation.schemas import FederatedRecipe
from app.flows.job_run import LoadedData
from app.jobs.models import Job
from app.jobs.schemas import TrainingConfig
from app.jobs.search_schemas import SearchCandidate
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.privacy import events, noise
from app.registry import artifacts
from app.registry.models import TrainedModel
from tests.conftest import PATIENT, small_dataset
from worker.trainers import (
    FitPlan,
    FittedModel,
    OnReport,
    Report,
    register_trainer,
    unregister_trainer,
)

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

CLIP = 2.0
"""Each encoded row is clipped to this L2 norm (public), so one patient moves the released
vector by at most sqrt(CLIP^2 + 1): its L2 sensitivity."""
VARIANCE = 0.25
"""The shared per-input variance the discriminant assumes (public, not estimated)."""


class NoisyMeans(Family):
    """A linear discriminant from the classes' noisy sums: one Gaussian release."""

    name = "toy_noisy_means"
    learning_rates = {"adam": 0.0, "sgd": 0.0}  # no optimizer: never read
    trainer = "toy_noisy_means"

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_inputs, 1))

    def linear_weights(self, network: nn.Module) -> np.ndarray | None:
        (layer,) = network.children()
        assert isinstance(layer, nn.Linear)
        return layer.weight.detach().double().numpy()[0]

    def plan_release(self, request: ReleaseRequest) -> ReleasePlan:
        if request.target_epsilon is None:
            assert request.noise_multiplier is not None
            sigma = request.noise_multiplier
        else:
            try:
                sigma = noise.noise_for_target(target_epsilon=request.target_epsilon,
                                               delta=request.delta, sample_rate=1.0, steps=1)
            except noise.TargetUnreachable as error:
                raise PlanRefused(str(error), field="privacy.target_epsilon") from error
        event = events.one_shot("gaussian", [sigma])  # a GaussianDpEvent, composed once
        return ReleasePlan(event=event, noise_multiplier=sigma,
                           settings={"noise_multiplier": sigma, "clip": CLIP, "draws": 1})


class NoisyMeansTwice(NoisyMeans):
    """The same model from two independent releases at sqrt(2) times the noise, averaged:
    an event that is a composition of Gaussians (``SelfComposedDpEvent``), not one-shot."""

    name = "toy_noisy_means_twice"

    def plan_release(self, request: ReleaseRequest) -> ReleasePlan:
        once = super().plan_release(request)
        sigma = once.noise_multiplier
        event = SelfComposedDpEvent(GaussianDpEvent(sigma * np.sqrt(2.0)), 2)
        return ReleasePlan(event=event, noise_multiplier=sigma,
                           settings={**once.settings, "draws": 2})


class NoisyMeansTrainer:
    """Sums [y x, (1 - y) x, y, 1 - y] over the clipped encoded rows, releases it ``draws``
    times with Gaussian noise of std sqrt(draws) sigma sqrt(CLIP^2 + 1) and averages (one
    draw: noise std sigma sqrt(CLIP^2 + 1)), and reads a linear discriminant off it."""

    name = "toy_noisy_means"

    def fit(self, plan: FitPlan, data: LoadedData, on_report: OnReport, *,
            device: torch.device) -> FittedModel:
        settings = plan.settings["release"]
        x = data.encoder.encode(data.split.train.x)
        x *= np.minimum(1.0, settings["clip"] / np.maximum(np.linalg.norm(x, axis=1), 1e-12))[
            :, None]
        y = np.asarray(data.split.train.y, dtype=np.float64)
        exact = np.concatenate([y @ x, (1 - y) @ x, [y.sum(), (1 - y).sum()]])
        draws = int(settings["draws"])
        scale = settings["noise_multiplier"] * np.sqrt(draws * (settings["clip"] ** 2 + 1.0))
        noise = np.random.default_rng().normal(0.0, scale, (draws, *exact.shape))
        noisy = exact + noise.mean(axis=0)
        d = x.shape[1]
        n1, n0 = max(noisy[2 * d], 1.0), max(noisy[2 * d + 1], 1.0)
        m1, m0 = noisy[:d] / n1, noisy[d:2 * d] / n0
        network = create_family(plan.kind).network(d, plan.hidden_units)
        with torch.no_grad():
            layer = network[0]
            layer.weight.copy_(torch.as_tensor((m1 - m0) / VARIANCE)[None, :])
            layer.bias.fill_(float((m0 @ m0 - m1 @ m1) / (2 * VARIANCE) + np.log(n1 / n0)))
        on_report(Report(epoch=1, epochs=1, steps=1, spent=[plan.event]))
        return FittedModel(network=network.eval(), spent=[plan.event], epochs_completed=1)


@pytest.fixture(params=[NoisyMeans, NoisyMeansTwice])
def noisy_means(request: pytest.FixtureRequest) -> Iterator[Family]:
    family = register_family(request.param())
    register_trainer(NoisyMeansTrainer())
    try:
        yield family
    finally:
        unregister_family(family.name)
        unregister_trainer(NoisyMeansTrainer.name)


def _public_request(job: Job) -> ReleaseRequest:
    """The request the job was planned from, as far as the toy plan reads it."""
    return ReleaseRequest(target_epsilon=job.target_epsilon, noise_multiplier=None,
                          delta=job.delta, n_train=0, n_calibration=0, n_evaluation=0,
                          n_inputs=0, schema=BUILT_IN_SCHEMA, training={})


def _submit(client: TestClient, **body: Any) -> Any:
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    return client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **body})


def test_trains_charges_its_event_and_scores_with_reasons(
        noisy_means: Family, client: TestClient, run_worker: Any, db: Database) -> None:
    submitted = _submit(client, privacy={"target_epsilon": 1.0},
                        training={"model": noisy_means.name})
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job

    with db.session_scope() as session:
        row = session.get(Job, job_id)
        assert row is not None and not row.dp_sgd  # no DP-SGD columns made up
        assert (row.sample_rate, row.steps, row.epochs, row.max_grad_norm) == (None,) * 4
        entry = ledger_service.entry_of(session=session, scope=Scope.job(job_id))
        assert entry is not None and entry.status == "committed"
        event = events.from_json(entry.event)
        planned = noisy_means.plan_release(_public_request(row))
        assert events.canonical(event) == events.canonical(planned.event)
        charged, charged_rdp, delta = entry.epsilon_prv, entry.epsilon_rdp, entry.delta
        dataset = session.get(Dataset, row.dataset_id)
        assert dataset is not None
        assert ledger_service.verify_chain(session=session, dataset=dataset)["valid"]
        model = session.get(TrainedModel, int(job["model_id"]))
        assert model is not None and model.kind == noisy_means.name
        assert model.epsilon == pytest.approx(charged, rel=1e-9)
        network, config = artifacts.load(model.artifact_sha256)
    pld = PLDAccountant().compose(event).get_epsilon(delta)
    rdp = RdpAccountant().compose(event).get_epsilon(delta)
    assert charged == pytest.approx(pld, rel=2e-3) and charged >= pld * (1 - 1e-3)
    assert charged <= 1.0  # the target
    assert charged_rdp == pytest.approx(rdp, rel=2e-3) and charged_rdp >= rdp * (1 - 1e-3)
    assert config["family"] == noisy_means.name

    for accept in ("application/json", "text/html"):
        report = client.get(f"/v1/datasets/{row.dataset_id}/privacy-report",
                            headers={"Accept": accept})
        assert report.status_code == 200, report.text
    assert client.get(f"/v1/jobs/{job_id}/privacy-report").status_code == 404  # DP-SGD's

    scored = client.post("/v1/risk", json={"features": PATIENT, "model_id": job["model_id"]})
    assert scored.status_code == 200, scored.text
    answer = scored.json()
    assert answer["model"]["kind"] == noisy_means.name
    reasons = {c["feature"]: c["contribution"] for c in answer["contributions"]}
    assert set(reasons) == set(PATIENT)
    assert answer["reference"]["log_odds"] + sum(reasons.values()) == pytest.approx(
        answer["log_odds"], abs=1e-5)


def test_the_accounted_search_refuses_it_at_submission(noisy_means: Family,
                                                       client: TestClient) -> None:
    refused = _submit(client, privacy={"target_epsilon": 1.0},
                      training={"model": noisy_means.name},
                      search={"candidates": [{"learning_rate": 0.1}], "runs": "poisson",
                              "mean_runs": 2})
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["errors"][0]["field"] == "training.model", refused.json()


def test_over_budget_is_a_job_409_with_the_largest_target(noisy_means: Family,
                                                          client: TestClient) -> None:
    dataset = client.post("/v1/datasets", json=small_dataset(
        privacy_budget={"epsilon": 0.5, "delta": 1e-5}))
    assert dataset.status_code == 201, dataset.text
    refused = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                            "privacy": {"target_epsilon": 1.0},
                                            "training": {"model": noisy_means.name}})
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["job_epsilon"] > 0.5
    assert 0.4 < body["largest_fitting_target_epsilon"] <= 0.5, body


def _problem_field(response: Any) -> str:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return str(response.json()["errors"][0]["field"])


def test_a_search_candidate_naming_it_is_refused(noisy_means: Family,
                                                 client: TestClient) -> None:
    refused = _submit(client, privacy={"target_epsilon": 1.0},
                      search={"candidates": [{"model": noisy_means.name}], "runs": "poisson",
                              "mean_runs": 2})
    assert _problem_field(refused).endswith("model"), refused.json()
    assert "not trained by DP-SGD" in refused.text


def test_federation_refuses_it_at_declaration(noisy_means: Family,
                                              client: TestClient) -> None:
    body = {
        "name": "crisis-network", "role": "site", "address": "coordinator.example:9092",
        "schema_sha256": schema_hash(BUILT_IN_SCHEMA),
        "recipe": {"model": noisy_means.name, "rounds": 3, "local_steps": 4,
                   "target_epsilon": 2.0},
        "sites": [{"name": "clinic-a"}, {"name": "clinic-b"}], "site_name": "clinic-a",
    }
    refused = client.post("/v1/federations", json=body)
    assert _problem_field(refused) == "recipe.model", refused.json()
    assert "not trained by DP-SGD" in refused.text


def test_the_white_box_audit_refuses_its_job(noisy_means: Family,
                                             client: TestClient) -> None:
    submitted = _submit(client, privacy={"target_epsilon": 1.0},
                        training={"model": noisy_means.name})
    assert submitted.status_code == 202, submitted.text
    refused = client.post("/v1/audits", json={"job_id": submitted.json()["id"]})
    assert _problem_field(refused) == "job_id", refused.json()
    assert "training.model" in refused.json()["detail"]


def test_the_schemas_list_it_only_where_it_is_taken(noisy_means: Family) -> None:
    def enum(model: Any, *path: str) -> list[str]:
        schema = model.model_json_schema()
        for key in path:
            schema = schema[key]
        return list(schema["properties"]["model"]["enum"])

    assert noisy_means.name in enum(TrainingConfig)
    assert noisy_means.name not in enum(FederatedRecipe)
    assert noisy_means.name not in enum(SearchCandidate)


class OverspendingTrainer(NoisyMeansTrainer):
    """Says it spent twice the reserved signal-to-noise: the worker must not keep its model."""

    def fit(self, plan: FitPlan, data: LoadedData, on_report: OnReport, *,
            device: torch.device) -> FittedModel:
        fitted = super().fit(plan, data, on_report, device=device)
        sigma = float(plan.settings["release"]["noise_multiplier"])
        fitted.spent = [events.one_shot("gaussian", [sigma / 2])]
        return fitted


def test_a_trainer_that_spends_more_than_reserved_fails_its_job(
        client: TestClient, run_worker: Any, db: Database) -> None:
    family = register_family(NoisyMeans())
    register_trainer(OverspendingTrainer())
    try:
        submitted = _submit(client, privacy={"target_epsilon": 1.0},
                            training={"model": family.name})
        assert submitted.status_code == 202, submitted.text
        assert run_worker() == 1
    finally:
        unregister_family(family.name)
        unregister_trainer(OverspendingTrainer.name)
    job = client.get(f"/v1/jobs/{submitted.json()['id']}").json()
    assert job["status"] == "failed" and job["model_id"] is None, job
    with db.session_scope() as session:
        entry = ledger_service.entry_of(session=session,
                                        scope=Scope.job(submitted.json()["id"]))
        assert entry is not None and entry.status == "committed"  # it touched the data
