"""The evaluation-AUC bench runs end to end on its one table that needs no extra package, prints
both bin rules beside the model's exact AUC, and leaves the production bin rule in place."""

import pytest
import torch

from bench import evaluation_auc
from worker import dp_histogram


def test_one_seed_on_the_generator_prints_both_rules(capsys: pytest.CaptureFixture[str]) -> None:
    rule, threads = dp_histogram.bin_edges, torch.get_num_threads()
    try:
        results = evaluation_auc.main(["--tables", "crisis", "--seeds", "1", "--draws", "2"])
    finally:
        torch.set_num_threads(threads)
    assert dp_histogram.bin_edges is rule
    printed = capsys.readouterr().out
    assert "| legacy: reported |" in printed and "| current: reported |" in printed
    cells = results["crisis"]
    assert set(cells) == set(evaluation_auc.EPSILONS)
    for cell in cells.values():
        assert 0.5 < cell.true[0] < 1 and cell.rows > 2000
        assert cell.legacy.bins == 18 and cell.current.bins == len(
            dp_histogram.bin_edges({"low_medium": 0.05, "medium_high": 0.2})) + 1
    assert printed.count("| crisis |") == 2
