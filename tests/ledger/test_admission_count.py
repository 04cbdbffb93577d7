"""The bench's figure: budget epsilon 8 admits about ten epsilon-2 jobs through the Rényi
filter (naive summation: 4), never more than the exact PLD composition of the same jobs."""

from pathlib import Path

from bench.ledger_admission import (
    BUDGET,
    admitted_by_ledger,
    job_mechanism,
    pld_ceiling,
    union_bound_count,
)


def test_the_filter_admits_between_naive_summation_and_the_exact_ceiling(tmp_path: Path) -> None:
    admitted = admitted_by_ledger(f"sqlite:///{tmp_path / 'count.db'}")
    mechanism, delta = job_mechanism()
    # The registered dataset's training part is a random ~70% (its own secret), so its sample
    # rate, and the admitted count, can differ by one from the planned mechanism's.
    assert 9 <= admitted <= pld_ceiling(mechanism, delta, BUDGET)
    assert admitted > union_bound_count(mechanism, delta, BUDGET)
