"""Three clinics and a coordinator as separate processes on loopback train one model on Flower:
each clinic's ledger charges exactly its own rounds (checked against an independent
dp-accounting composition), each clinic registers the model with its own DP evaluation, and the
coordinator reports which sites took part in which round and the federation's evaluation."""

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from bench import clinics
from bench.clinics import CLINICS
from tests.conftest import PATIENT
from tests.federated.tls import write_certificates

pytestmark = pytest.mark.slow
ROUNDS, LOCAL_STEPS, EPSILON = 4, 25, 3.0
SIZES = {"clinic-a": 40_000}
"""These tests' sizes where they differ from ``clinics.CLINICS`` (the bench keeps those). With
20,000 rows at the largest clinic the federation's summed held-out parts held 59-83 noisy
positives, and its evaluation reports no ROC-AUC below 40.5 (2 noise stds of the 19 summed
bins: 2 x 4.64 x sqrt(19)), so about one run in twenty-five had none; with 40,000 they hold
about 150, more than 5 stds of that sum (20.2) above the floor."""


def _independent_epsilon(entry: dict[str, Any], steps: int, pld: bool = False) -> float:
    """dp-accounting's RDP (or PLD) epsilon of ``steps`` of the entry's Poisson-subsampled
    Gaussian at its delta."""
    event = SelfComposedDpEvent(PoissonSampledDpEvent(
        entry["sample_rate"], GaussianDpEvent(entry["noise_multiplier"])), steps)
    accountant = PLDAccountant() if pld else RdpAccountant()
    return float(accountant.compose(event).get_epsilon(entry["delta"]))


def _charged_epsilon(service: clinics.Service, dataset_id: int, entry_id: int) -> float:
    """The ledger's epsilon of what the entry charged (its point on the dataset's timeline)."""
    with service.http("privacy_officer") as officer:
        report = officer.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    (point,) = [p for p in report["timeline"] if p["entry_id"] == entry_id]
    return float(point["entry_epsilon"])


def _ledger_entry(service: clinics.Service, dataset_id: int, job_id: int) -> dict[str, Any]:
    with service.http("privacy_officer") as officer:
        report = officer.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
        verified = officer.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
    assert verified["valid"], verified
    (entry,) = [e for e in report["entries"] if e["job_id"] == job_id]
    return dict(entry)


SHORT_LEASE = {"worker_lease_seconds": "3", "api_reap_seconds": "0.5"}
"""The clinic the kill test kills (the last): its restarted API reaps its part within seconds.
The others keep the default lease, so a slow moment on a shared machine cannot lose theirs."""


@dataclass
class Cluster:
    """A coordinator and the three clinics, over Flower's TLS (the coordinator's certificate,
    each clinic checking it), each clinic signing its answers with its own key; the last
    clinic with a short lease, so its part is reaped within seconds of its kill. Shared by the
    tests of this module
    (each declares its own federation and registers its own cohorts)."""

    tls: Path
    coordinator: clinics.Service
    sites: list[clinics.Service]
    site_env: list[dict[str, str]]

    def restart(self, index: int) -> clinics.Service:
        """Start clinic ``index`` again on its own database, as it was started (its API keys
        are in that database: the same ones serve)."""
        keys = self.sites[index].keys
        self.sites[index] = clinics.start(self.sites[index].root, **self.site_env[index])
        self.sites[index].keys = keys
        clinics.wait_ready(self.sites[index])
        return self.sites[index]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("federation")
    ca = write_certificates(root / "tls")
    envs = [{"flower_root_certificate": str(ca), **clinics.site_key(root / name)}
            for name, _, _ in CLINICS]
    envs[-1].update(SHORT_LEASE)
    running = Cluster(root / "tls", clinics.start(root / "coordinator"), [], envs)
    try:  # whatever fails, every service started so far is stopped
        for (name, _, _), env in zip(CLINICS, envs, strict=True):
            running.sites.append(clinics.start(root / name, **env))
        clinics.wait_ready(running.coordinator, *running.sites)
        yield running
    finally:
        for service in (running.coordinator, *running.sites):
            service.stop()


def test_three_clinics_train_one_federated_model(cluster: Cluster) -> None:
    """Over Flower's TLS, each clinic signing its answers with its own key, declared in the
    federation."""
    coordinator, sites = cluster.coordinator, cluster.sites
    launched = clinics.launch(coordinator, sites, rounds=ROUNDS, local_steps=LOCAL_STEPS,
                              epsilon=EPSILON, seed=21, name="crisis-network",
                              sizes=SIZES, flower_certificates=str(cluster.tls))
    federation_id, server, jobs = launched.federation_id, launched.server, launched.parts
    finished = [clinics.job_when_final(site, job_id) for site, (_, job_id)
                in zip(sites, jobs, strict=True)]
    assert server.wait(timeout=120) == 0, (coordinator.root /
                                           "coordinator.log").read_text()[-3000:]
    with coordinator.http() as admin:
        report = admin.get(f"/v1/federations/{federation_id}").json()
    released = report["report"]["model_sha256"]
    for site, job, (dataset_id, job_id) in zip(sites, finished, jobs, strict=True):
        assert job["status"] == "succeeded", job
        entry = _ledger_entry(site, dataset_id, job_id)
        assert entry["charged_steps"] == ROUNDS * LOCAL_STEPS
        independent = _independent_epsilon(entry, entry["charged_steps"])
        assert entry["epsilon"]["rdp"] == pytest.approx(independent, rel=1e-3)
        with site.http("data_scientist") as http:
            model = http.get(f"/v1/models/{job['model_id']}").json()
        federation = model["metrics"]["federation"]
        assert federation["rounds_run"] == ROUNDS and not federation["secure_aggregation"]
        assert federation["model_sha256"] == released  # the coordinator's released model
        assert federation["federation_epsilon"] >= model["privacy"]["epsilon"] - 1e-6
        assert "federated model of crisis-network" in model["privacy"]["statement"]
        with site.http("clinician") as clinician:
            assessed = clinician.post("/v1/risk/fhir", json={
                "model_id": job["model_id"], "subject": "Patient/p-1", "features": PATIENT})
        assert assessed.status_code == 200, assessed.text
        notes = " ".join(note["text"] for note in assessed.json()["note"])
        assert "federated model of crisis-network (3 clinics" in notes
    assert report["state"] == "finished"
    # each clinic's evaluation signed over the released model's hash, so all three summed
    assert sorted(report["report"]["evaluated_sites"]) == sorted(n for n, _, _ in CLINICS)
    rounds = report["report"]["rounds"]
    assert [r["sites"] for r in rounds] == [sorted(n for n, _, _ in CLINICS)] * ROUNDS
    assert all(r["refused"] == [] for r in rounds)  # every answer signed by its clinic
    assert all(site["public_key"].startswith("ed25519:") for site in report["sites"])
    evaluation = report["report"]["evaluation"]
    assert evaluation["roc_auc"] is not None and evaluation["roc_auc"] > 0.6, evaluation


def test_three_clinics_train_over_secure_aggregation(cluster: Cluster) -> None:
    """Every round through Flower's SecAgg+ (the coordinator sums masked updates): each clinic
    charged exactly its rounds, each round's sum holds all three, the model as good."""
    coordinator, sites = cluster.coordinator, cluster.sites
    launched = clinics.launch(coordinator, sites, rounds=ROUNDS, local_steps=LOCAL_STEPS,
                              epsilon=EPSILON, seed=31, name="crisis-network-secure",
                              secure=True, sizes=SIZES,
                              flower_certificates=str(cluster.tls))
    finished = [clinics.job_when_final(site, job_id) for site, (_, job_id)
                in zip(sites, launched.parts, strict=True)]
    assert launched.server.wait(timeout=120) == 0, (coordinator.root /
                                                    "coordinator.log").read_text()[-3000:]
    for site, job, (dataset_id, job_id) in zip(sites, finished, launched.parts, strict=True):
        assert job["status"] == "succeeded", job
        entry = _ledger_entry(site, dataset_id, job_id)
        assert entry["charged_steps"] == ROUNDS * LOCAL_STEPS
        assert entry["epsilon"]["rdp"] == pytest.approx(
            _independent_epsilon(entry, entry["charged_steps"]), rel=1e-3)
        with site.http("data_scientist") as http:
            model = http.get(f"/v1/models/{job['model_id']}").json()
        assert model["metrics"]["federation"]["secure_aggregation"] is True
        assert "summed under secure aggregation" in model["privacy"]["statement"]
    report = _report(coordinator, launched.federation_id)
    assert report["state"] == "finished" and report["recipe"]["secure_aggregation"]
    rounds = report["report"]["rounds"]
    assert [r["sites"] for r in rounds] == [sorted(n for n, _, _ in CLINICS)] * ROUNDS
    assert all(r["refused"] == [] for r in rounds)
    evaluation = report["report"]["evaluation"]
    assert evaluation["roc_auc"] is not None and evaluation["roc_auc"] > 0.6, evaluation


def _report(coordinator: clinics.Service, federation_id: int) -> dict[str, Any]:
    with coordinator.http() as admin:
        return dict(admin.get(f"/v1/federations/{federation_id}").json())


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure-aggregation"])
def test_a_clinic_killed_mid_federation_keeps_the_charge_of_the_rounds_it_began(
        cluster: Cluster, secure: bool) -> None:
    """SIGKILL of one clinic mid-federation; with secure aggregation, whatever stage it was in,
    the two others' rounds go on (its masks rebuilt from their shares)."""
    rounds = 40
    coordinator, sites = cluster.coordinator, cluster.sites
    launched = clinics.launch(coordinator, sites, rounds=rounds, local_steps=LOCAL_STEPS,
                              epsilon=EPSILON, seed=41 + 10 * secure, secure=secure,
                              name=f"crisis-network-killed-{'secure' if secure else 'plain'}",
                              sizes=SIZES, flower_certificates=str(cluster.tls))
    federation_id, server, jobs = launched.federation_id, launched.server, launched.parts
    while len((_report(coordinator, federation_id)["report"] or {}).get("rounds", [])) < 3:
        assert server.poll() is None
        time.sleep(0.05)
    killed = sites[-1]
    killed.process.kill()  # SIGKILL: no goodbye, no settlement
    killed.process.wait()
    for site, (_, job_id) in zip(sites[:-1], jobs[:-1], strict=True):
        assert clinics.job_when_final(site, job_id)["status"] == "succeeded"
    assert server.wait(timeout=120) == 0
    report = _report(coordinator, federation_id)["report"]
    name = CLINICS[-1][0]
    took_part = [r["round"] for r in report["rounds"] if name in r["sites"]]
    assert took_part[0] == 1 and took_part[-1] < rounds
    assert all(len(r["sites"]) >= 2 for r in report["rounds"])
    assert name not in report["evaluated_sites"]

    restarted = cluster.restart(len(sites) - 1)  # its API reaps the lost lease
    dataset_id, job_id = jobs[-1]
    job = clinics.job_when_final(restarted, job_id, seconds=60)
    assert job["status"] == "failed" and job["error"]["code"] == "worker_lost"
    entry = _ledger_entry(restarted, dataset_id, job_id)
    # Charged per round before the round touches a row: the rounds it began, no more.
    assert entry["charged_steps"] == job["progress"]["epoch"] * LOCAL_STEPS
    assert len(took_part) <= job["progress"]["epoch"] <= len(took_part) + 1
    assert entry["remainder_released"]
    # The charged part's epsilon: between dp-accounting's tight PLD figure and its RDP bound.
    charged = _charged_epsilon(restarted, dataset_id, entry["id"])
    tight, bound = (_independent_epsilon(entry, entry["charged_steps"], pld=True),
                    _independent_epsilon(entry, entry["charged_steps"]))
    assert tight * 0.98 <= charged <= bound * 1.001, (tight, charged, bound)
    for site, (dataset_id, job_id) in zip(sites[:-1], jobs[:-1], strict=True):
        assert _ledger_entry(site, dataset_id, job_id)["charged_steps"] == \
            rounds * LOCAL_STEPS
