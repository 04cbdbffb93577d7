"""Exact Shapley explanations and risk bands."""

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch

from app.bands import band_of
from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.features import LOWER, N_FEATURES, REFERENCE, UPPER, scale
from app.registry.network import build_network
from app.scoring.explain import coalition_inputs, exact_shapley, shapley_from_values
from app.scoring.service import explain_rows
from worker.training import predict_log_odds as log_odds

Model = Callable[[np.ndarray], np.ndarray]


def _random_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.rint(rng.uniform(LOWER, UPPER, size=(n, N_FEATURES)))


def _nonlinear(x: np.ndarray) -> np.ndarray:
    return (
        np.sin(0.1 * x[:, 0] * x[:, 1])
        + 0.01 * x[:, 2] ** 2 * x[:, 3]
        + np.exp(0.05 * x[:, 4]) * x[:, 5]
        + np.tanh(0.02 * (x[:, 0] + x[:, 5]) - 0.3 * x[:, 1] * x[:, 4])
        + 0.5 * np.maximum(x[:, 3] - 10, 0)
    )


def _brute_force_shapley(f: Model, x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Shapley values by averaging marginal contributions over every permutation."""
    d = x.shape[0]

    def v(coalition: set[int]) -> float:
        z = np.array([x[j] if j in coalition else reference[j] for j in range(d)])
        return float(f(z[None, :])[0])

    phi = np.zeros(d)
    perms = list(itertools.permutations(range(d)))
    for order in perms:
        before: set[int] = set()
        for i in order:
            phi[i] += v(before | {i}) - v(before)
            before.add(i)
    return phi / len(perms)


# --- axioms ------------------------------------------------------------------------------------


def test_additivity_for_a_nonlinear_function() -> None:
    x = _random_rows(25, seed=1)
    phi, base, full = exact_shapley(_nonlinear, x, REFERENCE)
    assert phi.shape == (25, N_FEATURES)
    np.testing.assert_allclose(base, _nonlinear(REFERENCE[None, :])[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(full, _nonlinear(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(base + phi.sum(axis=1), full, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_additivity_for_an_mlp(seed: int) -> None:
    torch.manual_seed(seed)
    network = build_network("mlp").double()

    def f(raw: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return network(torch.as_tensor(scale(raw))).squeeze(-1).numpy()

    x = _random_rows(20, seed=seed)
    phi, base, full = exact_shapley(f, x, REFERENCE)
    np.testing.assert_allclose(full, f(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(base, f(REFERENCE[None, :])[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(base + phi.sum(axis=1), full, rtol=0, atol=1e-9)
    assert np.any(np.abs(phi) > 1e-3)  # the test is not vacuous


def test_linear_function_gets_weight_times_deviation() -> None:
    rng = np.random.default_rng(7)
    w = rng.normal(size=N_FEATURES)
    b = 0.37

    def f(x: np.ndarray) -> np.ndarray:
        return x @ w + b

    x = _random_rows(15, seed=3)
    phi, base, full = exact_shapley(f, x, REFERENCE)
    np.testing.assert_allclose(phi, w * (x - REFERENCE), rtol=0, atol=1e-9)
    assert base == pytest.approx(np.full(15, REFERENCE @ w + b), abs=1e-12)


def test_symmetric_features_get_equal_values() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        # features 0 and 1 enter symmetrically
        return (x[:, 0] + x[:, 1]) ** 2 + x[:, 0] * x[:, 1] * x[:, 2] + np.sin(x[:, 3]) * x[:, 4]

    reference = np.array([1.0, 1.0, 0.5, 0.0, 2.0, 3.0])
    x = np.array(
        [
            [3.0, 3.0, 2.0, 1.0, -1.0, 4.0],
            [-2.0, -2.0, 0.0, 5.0, 3.0, 0.0],
            [7.0, 7.0, -3.0, 2.0, 1.0, 1.0],
        ]
    )
    phi, _, _ = exact_shapley(f, x, reference)
    np.testing.assert_allclose(phi[:, 0], phi[:, 1], rtol=0, atol=1e-12)
    assert np.all(np.abs(phi[:, 0]) > 1e-6)


def test_ignored_feature_gets_zero() -> None:
    def f(x: np.ndarray) -> np.ndarray:  # ignores feature 2 (and 5)
        return np.exp(0.01 * x[:, 0]) * x[:, 1] + x[:, 3] * x[:, 4] - np.sqrt(np.abs(x[:, 0]))

    x = _random_rows(10, seed=4)
    phi, _, _ = exact_shapley(f, x, REFERENCE)
    np.testing.assert_allclose(phi[:, 2], 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(phi[:, 5], 0.0, rtol=0, atol=1e-12)
    assert np.all(np.abs(phi[:, [0, 1, 3, 4]]).sum(axis=1) > 0)


def test_features_equal_to_reference_get_zero() -> None:
    x = REFERENCE.copy()[None, :]
    x[0, 1] = 25  # only PHQ-9 differs from the reference patient
    phi, base, full = exact_shapley(_nonlinear, x, REFERENCE)
    assert phi[0, 1] == pytest.approx(full[0] - base[0], abs=1e-12)
    np.testing.assert_allclose(np.delete(phi[0], 1), 0.0, atol=1e-12)


# --- against brute force -----------------------------------------------------------------------


def _small_function(x: np.ndarray) -> np.ndarray:
    d = x.shape[1]
    out = np.tanh(x[:, 0] * x[:, d - 1]) + x[:, 0] ** 2
    for j in range(1, d):
        out = out + (j + 1) * np.sin(x[:, j] + x[:, j - 1] * x[:, 0])
    return out


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5])
def test_matches_brute_force_over_permutations(d: int) -> None:
    rng = np.random.default_rng(100 + d)
    x = rng.normal(size=(5, d))
    reference = rng.normal(size=d)
    phi, base, full = exact_shapley(_small_function, x, reference)
    for row in range(x.shape[0]):
        expected = _brute_force_shapley(_small_function, x[row], reference)
        np.testing.assert_allclose(phi[row], expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(base + phi.sum(axis=1), full, atol=1e-10)


def test_d4_against_brute_force_on_an_interaction_function() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        return x[:, 0] * x[:, 1] * x[:, 2] + np.maximum(x[:, 3] - x[:, 0], 0) + x[:, 1] ** 3

    x = np.array([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, -3.0]])
    reference = np.array([0.0, 1.0, -1.0, 0.5])
    phi, _, _ = exact_shapley(f, x, reference)
    for row in range(2):
        np.testing.assert_allclose(
            phi[row], _brute_force_shapley(f, x[row], reference), rtol=0, atol=1e-12
        )


def test_coalition_inputs_cover_every_subset_once() -> None:
    x = np.array([[10.0, 20.0, 30.0]])
    reference = np.array([1.0, 2.0, 3.0])
    z = coalition_inputs(x, reference)
    assert z.shape == (8, 3)
    np.testing.assert_array_equal(z[0], reference)  # empty coalition first
    np.testing.assert_array_equal(z[-1], x[0])  # full coalition last
    subsets = {tuple(bool(a == b) for a, b in zip(row, x[0], strict=True)) for row in z}
    assert len(subsets) == 8


def test_shapley_weights_sum_to_full_minus_empty() -> None:
    values = np.random.default_rng(0).normal(size=(3, 2**N_FEATURES))
    phi = shapley_from_values(values)
    np.testing.assert_allclose(phi.sum(axis=1), values[:, -1] - values[:, 0], atol=1e-12)


# --- explain_rows on a logistic network --------------------------------------------------------


@pytest.fixture
def logistic_network() -> torch.nn.Module:
    torch.manual_seed(0)
    network = build_network("logistic")
    with torch.no_grad():
        network[0].weight.copy_(torch.tensor([[0.1, 1.6, -0.9, 0.7, 0.5, 0.9]]))
        network[0].bias.fill_(-3.5)
    return network.eval()


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def test_explain_rows_log_odds_and_probability_add_up(logistic_network: torch.nn.Module) -> None:
    raw = np.array(
        [
            [34, 22, 35, 12, 1, 1],
            [40, 5, 70, 4, 0, 0],  # the reference patient
            [80, 0, 100, 0, 0, 0],
            [18, 27, 1, 50, 1, 1],
        ],
        dtype=np.float64,
    )
    e = explain_rows(logistic_network, BUILT_IN_ENCODER, raw)
    assert e.phi.shape == e.phi_p.shape == (4, N_FEATURES)

    full = log_odds(logistic_network, raw)
    base = log_odds(logistic_network, REFERENCE[None, :])[0]
    np.testing.assert_allclose(e.full, full, atol=1e-6)
    np.testing.assert_allclose(e.base, base, atol=1e-6)
    np.testing.assert_allclose(e.phi.sum(axis=1), e.full - e.base, atol=1e-9)

    p = _sigmoid(full)
    p_ref = _sigmoid(base)
    np.testing.assert_allclose(e.p, p, atol=1e-7)
    np.testing.assert_allclose(e.base_p, p_ref, atol=1e-7)
    np.testing.assert_allclose(e.phi_p.sum(axis=1), e.p - e.base_p, atol=1e-9)
    np.testing.assert_allclose(e.phi_p.sum(axis=1), p - p_ref, atol=1e-6)

    # The reference patient has no contributions at all.
    np.testing.assert_allclose(e.phi[1], 0.0, atol=1e-6)
    np.testing.assert_allclose(e.phi_p[1], 0.0, atol=1e-7)


def test_explain_rows_logistic_contributions_are_weight_times_scaled_deviation(
    logistic_network: torch.nn.Module,
) -> None:
    raw = np.array([[34, 22, 35, 12, 1, 1], [60, 9, 55, 20, 0, 1]], dtype=np.float64)
    e = explain_rows(logistic_network, BUILT_IN_ENCODER, raw)
    w = logistic_network[0].weight.detach().double().numpy()[0]
    expected = w * (scale(raw) - scale(REFERENCE[None, :]))
    np.testing.assert_allclose(e.phi, expected, atol=1e-5)
    # The PHQ-9 22 patient: a high PHQ-9 raises the risk; a low GAF (35 < 70) raises it too.
    assert e.phi[0, 1] > 0
    assert e.phi[0, 2] > 0
    # Probability-scale contributions have the same sign as the log-odds ones here.
    assert np.all(np.sign(e.phi_p[0]) == np.sign(e.phi[0]))


# --- bands -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probability", "band"),
    [(0.0, "low"), (0.01, "low"), (0.05, "medium"), (0.19, "medium"), (0.2, "high"), (1.0, "high")],
)
def test_band_of(probability: float, band: str) -> None:
    assert band_of(probability, {"low_medium": 0.05, "medium_high": 0.2}) == band
