"""The training-speed bench runs end to end at tiny sizes and prints its tables (no timings
are asserted: speed is for the bench, not the test suite)."""

import pytest
import torch

from bench import training_speed


def test_quick_bench_prints_the_comparison_and_scaling_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    threads = torch.get_num_threads()
    try:
        training_speed.main(["--quick", "--no-gpu", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "| method | s/epoch (best) | s/epoch (median) | x vectorised DP |" in printed
    for method in ("naive per-sample loop", "Opacus + DataLoader", "vectorised, non-private",
                   "vectorised DP-SGD"):
        assert f"| {method}" in printed
    for ratio in ("DP / non-private", "naive / DP", "opacus / DP"):
        assert f"- {ratio} = " in printed
    assert "| rows | steps/epoch | DP s/epoch | DP s/epoch (median) |" in printed
    assert "| 4,000 | 63 |" in printed
