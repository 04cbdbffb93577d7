"""Statistics sums carry no float rounding: each value is rounded once to a public grid within
its bounds and the grid units are summed in integers, so a neighbouring cohort's sum moves by
at most the stated sensitivity (a float64 running sum does not guarantee that)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from app.statistics.aggregate import exact_sums, grid_exponent


@pytest.mark.parametrize("seed", range(5))
def test_sums_are_the_exact_sums_of_grid_values_within_bounds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, lower, upper, cells = 20_000, -3.7, 91.3, 7
    values = rng.uniform(lower, upper, n)
    index = rng.integers(0, cells, n)
    sums = exact_sums(index, None, cells, values, lower, upper)
    scale = 2 ** grid_exponent(n, max(abs(lower), abs(upper)))
    for cell in range(cells):
        grid = [Fraction(round(v * scale), scale) for v in values[index == cell]]
        assert all(Fraction(lower) <= g <= Fraction(upper) for g in grid)
        assert Fraction(sums[cell]) == sum(grid)  # exact, not just close
        assert abs(sums[cell] - math.fsum(values[index == cell])) <= len(grid) / scale


def test_a_neighbour_moves_a_sum_by_at_most_the_bound() -> None:
    """Removing one record moves the released sum by at most max(|lower|, |upper|), exactly;
    a plain float64 accumulation of the same values is off by rounding."""
    rng = np.random.default_rng(3)
    lower, upper = 0.0, 1e6
    values = np.concatenate([[upper], rng.uniform(0.0, 1e-3, 200_000)])
    index = np.zeros(len(values), dtype=np.int64)
    with_it = exact_sums(index, None, 1, values, lower, upper)[0]
    without = exact_sums(index[1:], None, 1, values[1:], lower, upper)[0]
    assert with_it - without <= upper
    naive = float(np.bincount(index, weights=values)[0])
    assert naive != math.fsum(values)  # the naive sum does round


def test_members_outside_a_cell_add_nothing() -> None:
    values = np.array([1.5, 2.25, 100.0])
    member = np.array([True, True, False])
    sums = exact_sums(np.array([0, 1, 1]), member, 2, values, 0.0, 10.0)
    assert list(sums) == [1.5, 2.25]
