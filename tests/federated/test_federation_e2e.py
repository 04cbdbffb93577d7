"""Three clinics and a coordinator as separate processes on loopback train one model on Flower:
each clinic's ledger charges exactly its own rounds (checked against an independent
dp-accounting composition), each clinic registers the model with its own DP evaluation, and the
coordinator reports which sites took part in which round and the federation's evaluation."""

from pathlib import Path
from typing import Any

import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant

from tests.federated import clinics
from tests.federated.clinics import CLINICS

pytestmark = pytest.mark.slow
ROUNDS, LOCAL_STEPS, EPSILON = 4, 25, 3.0


def _independent_epsilon(entry: dict[str, Any], steps: int) -> float:
    """dp-accounting's RDP epsilon of ``steps`` of the entry's Poisson-subsampled Gaussian."""
    event = SelfComposedDpEvent(PoissonSampledDpEvent(
        entry["sample_rate"], GaussianDpEvent(entry["noise_multiplier"])), steps)
    return float(RdpAccountant().compose(event).get_epsilon(entry["delta"]))


def _ledger_entry(service: clinics.Service, dataset_id: int, job_id: int) -> dict[str, Any]:
    with service.http("privacy_officer") as officer:
        report = officer.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
        verified = officer.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    assert verified["valid"], verified
    (entry,) = [e for e in report["entries"] if e["job_id"] == job_id]
    return dict(entry)


def test_three_clinics_train_one_federated_model(tmp_path: Path) -> None:
    coordinator = clinics.start(tmp_path / "coordinator")
    sites = [clinics.start(tmp_path / name) for name, _, _ in CLINICS]
    try:
        clinics.wait_ready(coordinator, *sites)
        address = clinics.address()
        federation_id = clinics.declare(coordinator, clinics.federation_body(
            role="coordinator", address=address, site=None, rounds=ROUNDS,
            local_steps=LOCAL_STEPS, epsilon=EPSILON))
        server = clinics.coordinate(coordinator, federation_id)
        jobs = []
        for site, (name, rows, shift) in zip(sites, CLINICS, strict=True):
            here = clinics.declare(site, clinics.federation_body(
                role="site", address=address, site=name, rounds=ROUNDS,
                local_steps=LOCAL_STEPS, epsilon=EPSILON))
            dataset_id = clinics.register(site, name, rows, seed=len(jobs) + 21, shift=shift)
            joined = clinics.join(site, here, dataset_id)
            assert joined.status_code == 202, joined.text
            jobs.append((dataset_id, joined.json()["id"]))
        finished = [clinics.job_when_final(site, job_id) for site, (_, job_id)
                    in zip(sites, jobs, strict=True)]
        assert server.wait(timeout=120) == 0, (tmp_path / "coordinator" /
                                               "coordinator.log").read_text()[-3000:]
        for site, job, (dataset_id, job_id) in zip(sites, finished, jobs, strict=True):
            assert job["status"] == "succeeded", job
            entry = _ledger_entry(site, dataset_id, job_id)
            assert entry["charged_steps"] == ROUNDS * LOCAL_STEPS
            independent = _independent_epsilon(entry, entry["charged_steps"])
            assert entry["epsilon"]["rdp"] == pytest.approx(independent, rel=1e-3)
            with site.http("data_scientist") as http:
                model = http.get(f"/v1/models/{job['model_id']}").json()
            federation = model["metrics"]["federation"]
            assert federation["rounds_run"] == ROUNDS
            assert federation["federation_epsilon"] >= model["privacy"]["epsilon"] - 1e-6
        with coordinator.http() as admin:
            report = admin.get(f"/v1/federations/{federation_id}").json()
        assert report["state"] == "finished"
        rounds = report["report"]["rounds"]
        assert [r["sites"] for r in rounds] == [sorted(n for n, _, _ in CLINICS)] * ROUNDS
        assert report["report"]["evaluation"]["roc_auc"] > 0.6
    finally:
        for service in (coordinator, *sites):
            service.stop()
