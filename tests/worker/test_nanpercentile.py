"""``worker.histogram_metrics.nanpercentile`` gives exactly ``np.nanpercentile``'s figures.

The evaluation's intervals read its percentiles, so a served interval is unchanged only if
every figure is identical (``np.array_equal``, NaN where numpy's is NaN): checked on seeded
random replicates of the shapes the evaluation and monitoring pass, with and without NaN,
with all-NaN columns, ties, infinities and tiny counts."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from worker.evaluation import CI_LEVEL
from worker.histogram_metrics import intervals, nanpercentile

TAILS = [100 * (1 - CI_LEVEL) / 2, 100 * (1 + CI_LEVEL) / 2]


def _numpy(values: np.ndarray, q: list[float], axis: int = 0) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices
        return np.nanpercentile(values, q, axis=axis)


def _replicates(rng: np.random.Generator, shape: tuple[int, ...], nan_share: float) -> np.ndarray:
    """Replicates like the evaluation's: rates, ties (counts rounded), NaN where undefined."""
    values = rng.random(shape)
    coarse = rng.random(shape) < 0.3  # ties, as counts' ratios have
    values[coarse] = np.round(values[coarse] * 4) / 4
    values[rng.random(shape) < nan_share] = np.nan
    return values


@pytest.mark.parametrize("shape", [(1000,), (1000, 2), (1000, 4), (1000, 19), (1000, 2, 19),
                                   (1000, 4, 19), (7, 3), (1, 5), (2, 1)])
@pytest.mark.parametrize("nan_share", [0.0, 0.01, 0.3, 0.97])
def test_identical_to_numpy_on_the_evaluations_shapes(shape: tuple[int, ...],
                                                      nan_share: float) -> None:
    rng = np.random.default_rng(hash((shape, nan_share)) % 2**32)
    for q in (TAILS, [0.0, 50.0, 100.0], [12.5, 33.3, 99.9]):
        values = _replicates(rng, shape, nan_share)
        if len(shape) > 1:
            values[:, 0] = np.nan  # an all-NaN column
        assert np.array_equal(nanpercentile(values, q), _numpy(values, q), equal_nan=True)


def test_identical_along_another_axis() -> None:
    rng = np.random.default_rng(5)
    draws = _replicates(rng, (6, 1000), 0.2)  # monitoring's (lambdas, replicates)
    draws[2] = np.nan
    q = [0.625, 99.375]
    assert np.array_equal(nanpercentile(draws, q, axis=1), _numpy(draws, q, axis=1),
                          equal_nan=True)


def test_intervals_match_numpys_percentiles() -> None:
    rng = np.random.default_rng(11)
    boot = {"rate": _replicates(rng, (1000, 4, 19), 0.02), "auc": _replicates(rng, (1000,), 0.0)}
    low, high = intervals(boot, CI_LEVEL)
    for key, values in boot.items():
        lo, hi = _numpy(values, TAILS)
        undefined = np.isnan(values).mean(axis=0) > (1 - CI_LEVEL) / 2
        assert np.array_equal(low[key], np.where(undefined, np.nan, lo), equal_nan=True)
        assert np.array_equal(high[key], np.where(undefined, np.nan, hi), equal_nan=True)


_FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                    st.sampled_from([0.0, -0.0, 0.5, 1.0, np.nan]))


@settings(max_examples=300, deadline=None)
@given(values=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                         elements=_FLOATS),
       q=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=4))
def test_identical_to_numpy_on_any_floats(values: np.ndarray, q: list[float]) -> None:
    with np.errstate(invalid="ignore", over="ignore"):
        ours = nanpercentile(values, q)
        theirs = _numpy(values, q)
    assert ours.shape == theirs.shape
    assert np.array_equal(ours, theirs, equal_nan=True)
