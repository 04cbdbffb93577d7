"""Issue 3's figure: budget epsilon 8 admits 10 epsilon-2 jobs by Rényi composition, not 4."""

from pathlib import Path

from bench.ledger_admission import admitted_by_ledger


def test_ledger_admits_what_renyi_composition_allows(tmp_path: Path) -> None:
    assert admitted_by_ledger(f"sqlite:///{tmp_path / 'count.db'}") == 10
