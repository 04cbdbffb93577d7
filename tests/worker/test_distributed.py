"""One job across two processes (torchrun, gloo, CPU): the same privacy as one process, noise
once per step, Poisson sampling per rank, and a model as good as the single-process one."""

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from sklearn.metrics import roc_auc_score

from app.core.database import Database
from app.datasets import synthetic
from app.registry import service as registry_service
from tests.worker import ddp_probe
from worker.launch import ROOT, DistributedTrainingFailed, train_distributed
from worker.training import TrainingSpec, predict_proba

pytestmark = pytest.mark.slow
CPU = torch.device("cpu")


def _spec(n_train: int, **overrides: Any) -> TrainingSpec:
    batch, epochs = overrides.pop("batch_size", 256), overrides.pop("epochs", 8)
    batches = math.ceil(n_train / batch)
    values = dict(
        kind="logistic", hidden_units=8, epochs=epochs, batch_size=batch, learning_rate=0.5,
        momentum=0.9, max_grad_norm=1.0, noise_multiplier=1.0, sample_rate=1 / batches,
        steps=epochs * batches, delta=1e-5, seed=3, tail_average=0.5, world_size=2,
    )
    values.update(overrides)
    return TrainingSpec(**values)


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every rank's record of the two probe runs (see ``ddp_probe``)."""
    out = tmp_path_factory.mktemp("probe") / "ranks.pt"
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "--module", "tests.worker.ddp_probe", str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )
    return torch.load(out, weights_only=False)


def test_noise_is_added_once_per_step_not_once_per_rank(probe: list[dict[str, Any]]) -> None:
    first, second = probe[0]["noise"], probe[1]["noise"]
    assert torch.equal(first["grads"], second["grads"])  # one all-reduced gradient
    assert torch.equal(first["params"], second["params"])  # DPDDP broadcast rank 0's init
    spec = ddp_probe.NOISE
    assert first["expected_batch_size"] == int(ddp_probe.N_ROWS["noise"] * spec.sample_rate)
    once = spec.noise_multiplier * spec.max_grad_norm / first["expected_batch_size"]
    std = first["grads"].std().item()
    # ~13,000 draws: the std is within 2% of its value; noise per rank would be sqrt(2) x.
    assert std / once == pytest.approx(1.0, abs=0.05), (std, once)
    assert abs(first["grads"].mean().item()) < 0.05 * once


def test_each_rank_poisson_samples_its_own_shard(probe: list[dict[str, Any]]) -> None:
    spec, n = ddp_probe.NOISE, ddp_probe.N_ROWS["noise"]
    steps = [probe[r]["noise"]["rows"] for r in (0, 1)]
    assert len(steps[0]) == len(steps[1]) == spec.steps
    shards = [set().union(*map(set, rank)) for rank in steps]
    assert not shards[0] & shards[1]  # a record is never in two ranks' batches
    assert len(shards[0] | shards[1]) > 0.99 * n
    local = [[len(b) for b in rank] for rank in steps]
    assert len(set(local[0])) > 5 and len(set(local[1])) > 5  # Poisson: sizes vary per step
    global_sizes = np.add(local[0], local[1])
    sd = math.sqrt(n * spec.sample_rate * (1 - spec.sample_rate) / spec.steps)
    assert abs(global_sizes.mean() - n * spec.sample_rate) < 5 * sd  # rate q over ALL rows
    counts = np.bincount(np.concatenate([np.concatenate(r) for r in steps]).astype(int),
                         minlength=n)
    assert counts.mean() / spec.steps == pytest.approx(spec.sample_rate, rel=0.05)
    for rank in (0, 1):
        assert probe[rank]["noise"]["history"] == [
            (spec.noise_multiplier, spec.sample_rate, spec.steps)  # the global q, not q W, q / W
        ]


def test_empty_local_batches_keep_ranks_in_step(probe: list[dict[str, Any]]) -> None:
    spec = ddp_probe.SPARSE
    runs = [probe[r]["sparse"] for r in (0, 1)]
    assert [len(run["rows"]) for run in runs] == [spec.steps, spec.steps]
    assert min(sum(not b for b in run["rows"]) for run in runs) > 0.3 * spec.steps
    assert torch.equal(runs[0]["params"], runs[1]["params"])
    assert torch.isfinite(runs[0]["params"]).all()
    assert runs[0]["history"] == [(spec.noise_multiplier, spec.sample_rate, spec.steps)]


def test_a_stop_at_a_report_ends_after_exactly_the_reported_steps() -> None:
    table = synthetic.generate(1000, 6)
    spec = _spec(len(table.x), epochs=5)
    result = train_distributed(table.x, table.y, spec, device=CPU, on_epoch=lambda e, _h: e < 2)
    assert result.epochs_completed == 2 and result.stopped_early
    assert result.history == [(1.0, spec.sample_rate, 2 * spec.steps // spec.epochs)]


def test_a_failing_rank_fails_the_launch() -> None:
    table = synthetic.generate(1000, 6)
    spec = _spec(len(table.x), sample_rate=0.5)  # not what the sampler would do: refused
    with pytest.raises(DistributedTrainingFailed, match="differs from planned"):
        train_distributed(table.x, table.y, spec, device=CPU)


def test_a_two_process_job_spends_and_learns_as_one_process(
    client: TestClient, db: Database, run_worker: Any
) -> None:
    """Through the API and the worker: same plan, same spend, AUC on the held-out rows."""
    created = client.post("/v1/datasets", json={
        "name": "ddp", "source": {"kind": "synthetic", "n_rows": 4000, "seed": 21},
        "privacy_budget": {"epsilon": 20.0, "delta": 1e-5},
    })
    assert created.status_code == 201, created.text
    training = {"epochs": 8, "batch_size": 256, "seed": 3}
    ids = []
    for world_size in (1, 2):
        submitted = client.post("/v1/jobs", json={
            "dataset_id": created.json()["id"], "privacy": {"noise_multiplier": 1.0},
            "training": {**training, "world_size": world_size},
        })
        assert submitted.status_code == 202, submitted.text
        ids.append(submitted.json()["id"])
    assert run_worker() == 2
    one, two = (client.get(f"/v1/jobs/{job_id}").json() for job_id in ids)
    assert two["status"] == "succeeded", two
    assert two["training"]["world_size"] == 2 and two["progress"]["epoch"] == 8
    assert two["privacy"] == one["privacy"]  # the ledger's plan does not depend on W
    assert two["progress"]["epsilon_spent"] == one["progress"]["epsilon_spent"]
    assert two["progress"]["epsilon_spent"] == pytest.approx(
        two["privacy"]["epsilon_planned"]["pld"], rel=1e-9
    )
    report = client.get(f"/v1/jobs/{ids[1]}/privacy-report").json()
    assert report["steps"] == 8 * report["steps_per_epoch"] == one["privacy"]["steps"]
    assert [e["epoch"] for e in report["epsilon_per_epoch"]][-1] == 8
    # The served metrics are a DP release (noisy, binned); compare the models on fresh rows.
    fresh = synthetic.generate(20000, 99)
    with db.session_scope() as session:
        auc_one, auc_two = (
            roc_auc_score(fresh.y, predict_proba(registry_service.load_network(
                registry_service.get(session=session, model_id=job["model_id"])), fresh.x))
            for job in (one, two))
    assert auc_two > 0.75 and abs(auc_two - auc_one) < 0.03, (auc_two, auc_one)
    assert two["metrics"]["release"]["mechanism"] == "gaussian"


def test_world_size_is_bounded(client: TestClient, dataset: dict[str, Any]) -> None:
    response = client.post("/v1/jobs", json={
        "dataset_id": dataset["id"], "privacy": {"noise_multiplier": 1.0},
        "training": {"world_size": 9},
    })
    assert response.status_code == 422, response.text

