"""The search bench runs end to end on the generator: both recipes at the same target, each
plan's total epsilon within it, and a ``key=value`` summary last."""

import pytest

from bench import search


@pytest.mark.slow
def test_one_seed_on_the_generator_compares_at_equal_epsilon(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = search.main(["--rows", "3000", "--seeds", "1", "--epsilons", "8", "--mean-runs",
                           "1.5"])
    cell = results["crisis"][8.0]
    for recipe in ("defaults", "search"):
        assert len(cell.auc[recipe]) == 1 and 0.5 < cell.auc[recipe][0] <= 1.0
        assert 7.9 < cell.eps[recipe][0] <= 8.0
    assert len(cell.runs) == 1 and cell.runs[0] >= 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "auc_gain_eps8=" in last and "logloss_change_eps8=" in last
