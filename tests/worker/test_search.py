"""The worker's side of a search (worker.search): a candidate changes only what the noise does
not see, a run's score is post-processing of its calibration release, the best run keeps its
own calibration only where the part meets its floor, and M runs execute whatever K."""

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

from app.privacy import selection
from worker import calibration
from worker import search as worker_search
from worker.search import Run, kept_calibration, run_spec
from worker.training import TrainingResult, TrainingSpec, build_network

SPEC = TrainingSpec(kind="logistic", hidden_units=16, epochs=3, batch_size=64,
                    learning_rate=0.3, momentum=0.9, max_grad_norm=1.0, noise_multiplier=1.3,
                    sample_rate=0.1, steps=30, delta=1e-5, seed=0, optimizer="adam")


def test_a_candidate_changes_its_fields_and_never_the_mechanism() -> None:
    changed = run_spec(SPEC, {"model": "mlp", "hidden_units": 8, "learning_rate": 0.05,
                              "optimizer": "sgd", "max_grad_norm": 0.5, "tail_average": 0.0,
                              "momentum": 0.5})
    assert (changed.kind, changed.hidden_units, changed.learning_rate, changed.optimizer,
            changed.max_grad_norm, changed.tail_average, changed.momentum) == (
        "mlp", 8, 0.05, "sgd", 0.5, 0.0, 0.5)
    same = ("noise_multiplier", "sample_rate", "steps", "epochs", "batch_size", "delta", "seed")
    for name in same:
        assert getattr(changed, name) == getattr(SPEC, name)
    assert run_spec(SPEC, {}) == SPEC


def test_the_score_is_the_log_loss_of_the_map_on_the_binned_counts() -> None:
    centres = calibration.bin_logits()
    n = np.full(len(centres), 100.0)
    k = n / (1.0 + np.exp(-centres))  # calibrated at slope 1, intercept 0
    right = calibration.binned_log_loss(n, k, 1.0, 0.0)
    expected = float(np.sum(k * np.logaddexp(0, -centres) + (n - k) * np.logaddexp(0, centres))
                     / n.sum())
    assert math.isclose(right, expected, rel_tol=1e-12)
    assert calibration.binned_log_loss(n, k, 1.0, 1.0) > right
    assert calibration.binned_log_loss(n, k, 0.5, 0.0) > right
    assert math.isinf(calibration.binned_log_loss(np.zeros(3), np.zeros(3), 1.0, 0.0))


def _run(rows: int, counts: list[float]) -> Run:
    torch.manual_seed(0)
    network = build_network("logistic", 16, 3)
    released = calibration.Calibration(
        method=calibration.METHOD, rows=rows, noise_multiplier=1.0, slope=2.0, intercept=-1.0,
        bin_edges_logit=[0.0], noisy_counts=counts, noisy_positives=[1.0] * len(counts))
    return Run(0, TrainingResult(network=network, epochs_completed=3), released, 0.1)


def test_the_best_run_keeps_its_own_release_only_above_the_floor() -> None:
    floor = calibration.size_floor_rows(1.0)
    above = _run(floor + 10, [10.0, 20.0])
    before = [p.detach().clone() for p in above.result.network.parameters()]
    kept = kept_calibration(above, 1.0)
    assert kept == above.calibration
    assert any(not torch.equal(a, b) for a, b in
               zip(before, above.result.network.parameters(), strict=True))  # folded in
    below = _run(max(floor - 10, 1), [10.0, 20.0])
    before = [p.detach().clone() for p in below.result.network.parameters()]
    withheld = kept_calibration(below, 1.0)
    assert withheld.method != calibration.METHOD and withheld.noisy_counts == []
    assert all(torch.equal(a, b) for a, b in
               zip(before, below.result.network.parameters(), strict=True))
    assert dataclasses.asdict(withheld)["rows"] == below.calibration.rows


@pytest.mark.parametrize("k", [0, 1, 3, 6, 9])
def test_m_runs_execute_whatever_k_and_the_best_of_the_first_k_is_kept(
    monkeypatch: pytest.MonkeyPatch, k: int,
) -> None:
    scores = [0.9, 0.7, 0.8, 0.2, 0.6, 0.5]  # the best of all (0.2) is the fourth run
    calls: list[int] = []

    def one_run(*args: Any) -> Run:
        index = len(calls)
        calls.append(index)
        run = _run(10, [1.0])
        return dataclasses.replace(run, candidate=index, score=scores[index])

    monkeypatch.setattr(worker_search, "one_run", one_run)
    monkeypatch.setattr(selection, "draw_runs", lambda *args: k)
    plan = {"candidates": [{}], "runs": "poisson", "mean_runs": 2.0, "shape": None}
    best = worker_search.best_of_runs(None, None, SPEC, plan, 1.0,  # one_run needs neither
                                      np.random.default_rng(0), lambda: None, len(scores))
    assert len(calls) == len(scores)  # M, whatever K
    used = scores[:min(k, len(scores))]
    if not used:
        assert best is None  # K = 0: nothing released, after the same M runs
    else:
        assert best is not None and best.score == min(used)
