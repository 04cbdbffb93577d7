"""The privacy-audit bench runs end to end at tiny sizes and prints its tables (its figures are
for the bench; the audit's guarantees are tested in tests/worker and tests/unit)."""

import pytest
import torch

from bench import privacy_audit


def test_quick_bench_prints_audited_against_accounted(capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        privacy_audit.main(["--quick"])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "| target ε | σ | accounted ε (PLD) | audited ε, white-box |" in printed
    for label in ("| 1 |", "| 3 |", "| 8 |", "| ∞ |"):
        assert label in printed
    bug_row = next(line for line in printed.splitlines() if line.startswith("| 1 (bug"))
    assert "| 1 of 1 |" in bug_row  # the planted bug trips the alarm
    assert "| target ε | accounted ε | m = 50 | m = 200 |" in printed
