"""The family-choice benches: the dp_ebm family run as the worker runs it, and the verdicts
and rules read off the per-split figures (bench/family_choice.py, bench/family_rule.py)."""

from typing import Any

import numpy as np
import pytest

from bench import family_choice, family_rule, proxies
from bench import proxy_study as study


def _row(table: str, split: int, epsilon: float, n_train: int, numeric: int,
         auc: tuple[float, float], loss: tuple[float, float]) -> dict[str, Any]:
    public = {"n_train": n_train, "n_calibration": n_train // 5, "epsilon": epsilon,
              "delta": 1e-5, "numeric": numeric, "binary": 8 - numeric, "categorical": 0,
              "categories": 0, "inputs": 8}
    return {"table": table, "split": split, "public": public,
            "defaults": {"auc": auc[0], "log_loss": loss[0], "brier": 0.1},
            "family": {"auc": auc[1], "log_loss": loss[1], "brier": 0.1}}


def _cell(table: str, epsilon: float, n_train: int, numeric: int, gain: float,
          loss_gain: float = 0.0) -> list[dict[str, Any]]:
    """Three splits whose family - defaults AUC is ``gain`` give or take 0.001."""
    return [_row(table, s, epsilon, n_train, numeric, (0.70, 0.70 + gain + 0.001 * (s - 1)),
                 (0.30, 0.30 - loss_gain)) for s in range(3)]


def test_a_cell_is_the_familys_only_where_its_auc_wins_and_its_log_loss_does_not_lose() -> None:
    rows = (_cell("a", 3.0, 5000, 6, 0.05) + _cell("b", 3.0, 5000, 6, -0.05)
            + _cell("c", 3.0, 5000, 6, 0.002) + _cell("d", 3.0, 5000, 6, 0.05, -0.02))
    sides = {v.table: v.side for v in family_rule.verdicts(rows)}
    assert sides == {"a": "dp_ebm", "b": "defaults", "c": "tie", "d": "defaults"}
    assert family_rule.verdicts(rows, auc_only=True)[3].side == "dp_ebm"


def test_a_rule_holds_only_where_it_picks_none_of_the_defaults_cells() -> None:
    rows = (_cell("bends", 3.0, 5000, 6, 0.05) + _cell("small", 3.0, 500, 6, -0.05)
            + _cell("coded", 3.0, 5000, 1, -0.05))
    cells = family_rule.verdicts(rows)
    held = family_rule.rules_that_hold(cells)
    assert held  # e.g. n_train >= 5000 and a numeric share >= 0.75
    for rule, wins in held:
        assert wins == 1
        assert family_rule.picks(rule, cells[0].public)
        assert not family_rule.picks(rule, cells[1].public)
        assert not family_rule.picks(rule, cells[2].public)
    same_profile = rows + _cell("linear", 3.0, 5000, 6, -0.05)  # bends' public quantities
    assert family_rule.rules_that_hold(family_rule.verdicts(same_profile)) == []


def test_the_new_generators_declare_what_their_names_say() -> None:
    bends, coded = proxies.make("bends@400"), proxies.make("coded@400")
    assert [f.kind.value for f in bends.schema.features].count("binary") == 2
    kinds = [f.kind.value for f in coded.schema.features]
    assert kinds.count("binary") == 20 and kinds.count("categorical") == 4
    for table in (bends, coded):
        assert set(np.unique(table.y)) == {0.0, 1.0}
        other = proxies.make(f"{table.name}", generator_seed=3)
        assert other.schema == table.schema and not np.array_equal(other.x, table.x)


@pytest.mark.slow
def test_the_family_runs_as_the_worker_runs_it() -> None:
    pytest.importorskip("interpret")
    table = proxies.make("bends@900", generator_seed=0)
    parts = study.split(table, 0)
    scored = family_choice.family_scores(table, parts, 3.0, noise_seed=1)
    assert 0.5 < scored.auc <= 1.0 and 0.0 < scored.log_loss < 1.0
    assert scored == family_choice.family_scores(table, parts, 3.0, noise_seed=1)  # seeded
