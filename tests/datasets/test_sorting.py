"""The fast uint64 sort equals numpy's, bit for bit: fingerprints depend on it."""

import numpy as np
import pytest

from app.core.sorting import sort_uint64


@pytest.mark.parametrize("n", [0, 1, 100, 4096, 100_000])
def test_equals_numpy_for_every_range_of_words(n: int) -> None:
    rng = np.random.default_rng(n)
    words = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    edges = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)
    words[: n // 10] = edges[np.arange(n // 10) % 5]  # signed and unsigned order's edges
    before = words.copy()
    assert np.array_equal(sort_uint64(words), np.sort(words))
    assert np.array_equal(words, before)  # the input is left alone

