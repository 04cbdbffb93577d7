"""The fairness-budget bench runs its core on a tiny setting through the service's own paths
(plan, train, the worker's evaluate step, ``fairness_gaps``) and prints every table."""

import math

import pytest
import torch

from bench import fairness_budget
from worker.monitoring.fairness import GAP_METRICS


def test_one_job_per_epsilon_fills_every_gap_and_prints_the_summary(
        capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        results = fairness_budget.main(["--rows", "20000", "--seeds", "1",
                                        "--epsilons", "1", "8"])
    finally:
        torch.set_num_threads(threads)
    cells = results[20_000]
    age = {key[2] for key in cells if key[1] == "age"}
    assert age == {"18-29", "30-44", "65-80"}  # every band but the reference, 45-64
    assert {key[1] for key in cells} == {"age", "sex"}
    for eps in (1.0, 8.0):
        for metric in GAP_METRICS:
            older = cells[(eps, "age", "65-80", "45-64", metric)]
            assert sum(older.verdicts.values()) == 1 and len(older.exact) == 1
            assert set(older.verdicts) <= set(fairness_budget.VERDICTS)
        exact_auc_gap = cells[(eps, "age", "65-80", "45-64", "roc_auc")].exact[0]
        assert math.isfinite(exact_auc_gap) and exact_auc_gap < -0.05  # the effect, noise-free
    printed = capsys.readouterr().out
    assert "## Summary: the 65-80 band's ROC-AUC gap" in printed
    assert "| 20,000 | 8 |" in printed and "| age: 65-80 vs 45-64 | roc_auc |" in printed
    for metric in GAP_METRICS:
        assert f"### {metric}: group minus reference" in printed
