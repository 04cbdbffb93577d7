"""The dp_ebm family end to end: ``POST /v1/jobs`` plans its one release from public
quantities, the worker fits interpret's DP-EBM at that noise, the ledger charges that event
(dp-accounting's epsilon, the target), and scoring answers with the terms as contributions."""

from typing import Any

import numpy as np
import pytest
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from fastapi.testclient import TestClient

from app.core.database import Database
from app.families import create_family
from app.families.dp_ebm import noise_of
from app.families.ebm_accounting import EbmRecipe, plan
from app.families.ebm_network import AdditiveNetwork
from app.fhir.service import percent
from app.jobs.fitted import RELEASE_KEY
from app.jobs.models import Job
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.privacy import events
from app.registry import artifacts
from app.registry.models import TrainedModel
from app.scoring.explain import exact_shapley
from tests.cdshooks.test_cds_hooks import URL as CDS_URL
from tests.cdshooks.test_cds_hooks import hook_call
from tests.conftest import PATIENT, small_dataset
from tests.fhir.r4 import valid

pytest.importorskip("interpret")


def _submit(client: TestClient, **body: Any) -> Any:
    dataset = client.post("/v1/datasets", json=small_dataset())
    assert dataset.status_code == 201, dataset.text
    return client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **body})


@pytest.mark.slow
def test_dp_ebm_trains_charges_its_event_and_scores_with_its_terms(
        client: TestClient, run_worker: Any, db: Database) -> None:
    submitted = _submit(client, privacy={"target_epsilon": 2.0},
                        training={"model": "dp_ebm"})
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job

    with db.session_scope() as session:
        row = session.get(Job, job_id)
        assert row is not None and not row.dp_sgd
        entry = ledger_service.entry_of(session=session, scope=Scope.job(job_id))
        assert entry is not None and entry.status == "committed"
        charged = events.from_json(entry.event)
        planned = plan(EbmRecipe(2.0, row.delta, 6))
        assert events.canonical(charged) == events.canonical(planned.event)
        assert noise_of(row.training[RELEASE_KEY]) == planned
        epsilon, delta = entry.epsilon_prv, entry.delta
        model = session.get(TrainedModel, int(job["model_id"]))
        assert model is not None and model.kind == "dp_ebm"
        network, config = artifacts.load(model.artifact_sha256)
    assert epsilon == pytest.approx(2.0, rel=1e-6)
    assert PLDAccountant().compose(charged).get_epsilon(delta) == pytest.approx(2.0, rel=1e-3)
    assert isinstance(network, AdditiveNetwork) and config["family"] == "dp_ebm"

    scored = client.post("/v1/risk", json={"features": PATIENT, "model_id": job["model_id"]})
    assert scored.status_code == 200, scored.text
    answer = scored.json()
    assert answer["model"]["kind"] == "dp_ebm"
    reasons = {c["feature"]: c["contribution"] for c in answer["contributions"]}
    assert set(reasons) == set(PATIENT)
    assert answer["reference"]["log_odds"] + sum(reasons.values()) == pytest.approx(
        answer["log_odds"], abs=1e-5)
    # the reasons are the terms: the exact coalition enumeration agrees
    from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
    from app.datasets.schema.encoding import encoder_for

    encoder = encoder_for(BUILT_IN_SCHEMA)
    terms = create_family("dp_ebm").additive_terms(network)
    assert terms is not None
    x = encoder.encode(np.array([[PATIENT[f.name] for f in BUILT_IN_SCHEMA.features]]))
    expected = terms(x) - terms(encoder.reference_encoded[None, :])
    names = [f.name for f in BUILT_IN_SCHEMA.features]
    np.testing.assert_allclose([reasons[n] for n in names], expected[0], atol=1e-6)

    def log_odds(rows: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return network(torch.from_numpy(rows)).double().numpy()[:, 0]

    phi, _, _ = exact_shapley(log_odds, x, encoder.reference_encoded)
    np.testing.assert_allclose(phi, expected, atol=1e-9)

    # FHIR reuses the same answer: a valid RiskAssessment by this model, its probability
    fhir = client.post("/v1/risk/fhir", json={"features": PATIENT, "model_id": job["model_id"],
                                              "subject": "Patient/1"})
    assert fhir.status_code == 200, fhir.text
    ra = fhir.json()
    valid(ra)
    assert ra["method"]["coding"][0]["code"] == f"model-{job['model_id']}"
    assert ra["prediction"][0]["probabilityDecimal"] == pytest.approx(answer["probability"],
                                                                      abs=1e-3)
    # and CDS Hooks: the active model (this one) answers an EHR's patient-view card
    card_call = client.post(CDS_URL, json=hook_call())
    assert card_call.status_code == 200, card_call.text
    (card,) = card_call.json()["cards"]
    assert percent(answer["probability"]) in card["summary"]
    assert f"Model {job['model_id']} (" in card["detail"]


def test_a_noise_multiplier_request_is_refused(client: TestClient) -> None:
    refused = _submit(client, privacy={"noise_multiplier": 1.0}, training={"model": "dp_ebm"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "privacy.noise_multiplier"
