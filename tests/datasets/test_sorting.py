"""The fast uint64 sort equals numpy's, bit for bit: fingerprints depend on it."""

import numpy as np
import pytest

from app.core.sorting import argsort_uint64, sort_uint64


@pytest.mark.parametrize("n", [0, 1, 100, 4096, 100_000])
def test_equals_numpy_for_every_range_of_words(n: int) -> None:
    rng = np.random.default_rng(n)
    words = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    edges = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)
    words[: n // 10] = edges[np.arange(n // 10) % 5]  # signed and unsigned order's edges
    before = words.copy()
    assert np.array_equal(sort_uint64(words), np.sort(words))
    assert np.array_equal(words, before)  # the input is left alone


@pytest.mark.parametrize("n", [0, 5, 4096, 50_000])
def test_argsort_is_numpys_stable_order(n: int) -> None:
    """Equal words keep their order (the patient index keeps a patient's newest record)."""
    rng = np.random.default_rng(n)
    words = np.concatenate([rng.integers(0, 2**64, n // 2, dtype=np.uint64, endpoint=False),
                            np.array([0, 2**63, 2**64 - 1] * (n // 6), np.uint64)])
    words = words[rng.permutation(len(words))]
    ordered, order = argsort_uint64(words)
    expected = np.argsort(words, kind="stable")
    assert order.tolist() == expected.tolist()
    assert ordered.tolist() == words[expected].tolist()
