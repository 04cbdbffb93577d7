"""Shapley values with one player per declared feature: one-hot blocks move together, the
logistic closed form holds for any number of players, and past 12 players the permutation
estimate keeps exact additivity and lands within its reported error of the exact values."""

import numpy as np
import pytest
import torch

from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import encoder_for
from app.registry.network import build_network
from app.scoring.answer import direction_of
from app.scoring.explain import MAX_EXACT_PLAYERS, coalition_values, explain, shapley_from_values
from app.scoring.service import explain_rows


def _schema(n_numeric: int) -> DatasetSchema:
    features = [{"name": f"x{j}", "kind": "numeric", "lower": 0, "upper": 10, "reference": 5}
                for j in range(n_numeric)]
    features.append({"name": "site", "kind": "categorical",
                     "categories": ["north", "south", "east", "west"], "reference": "north"})
    features.append({"name": "flag", "kind": "binary", "reference": 0})
    return DatasetSchema.model_validate({"features": features, "outcome": {"name": "y"}})


def _rows(encoder_players: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    numeric = rng.uniform(0, 10, size=(n, encoder_players - 2))
    return np.column_stack([numeric, rng.integers(0, 4, n), rng.integers(0, 2, n)])


def _network(kind: str, n_inputs: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    network = build_network(kind, 8, n_inputs).double().eval()
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.mul_(3.0)  # a non-trivial model, far from linear for the MLP
    return network


def _model(network: torch.nn.Module):  # type: ignore[no-untyped-def]
    def log_odds(inputs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return network(torch.from_numpy(inputs.astype(np.float64))).squeeze(-1).numpy()

    return log_odds


def test_a_categorical_feature_is_one_player_and_its_block_moves_together() -> None:
    encoder = encoder_for(_schema(3))
    assert encoder.n_players == 5 and encoder.n_inputs == 3 + 4 + 1
    network = _network("mlp", encoder.n_inputs, seed=1)
    x = encoder.encode(_rows(5, 6, seed=2))
    e = explain(_model(network), x, encoder.reference_encoded, encoder.player_of_input)
    assert e.method == "exact" and e.phi.shape == (6, 5)
    np.testing.assert_allclose(e.base + e.phi.sum(axis=1), e.full, atol=1e-10)
    # A patient whose only difference from the reference is the site: all of it is the site's.
    row = encoder.reference_raw.copy()
    row[3] = 2  # "east"
    single = explain(_model(network), encoder.encode(row[None, :]), encoder.reference_encoded,
                     encoder.player_of_input)
    np.testing.assert_allclose(np.delete(single.phi[0], 3), 0.0, atol=1e-12)
    assert single.phi[0, 3] == pytest.approx(single.full[0] - single.base, abs=1e-12)


def test_the_logistic_closed_form_holds_past_the_exact_limit() -> None:
    encoder = encoder_for(_schema(MAX_EXACT_PLAYERS + 1))  # 15 players
    network = _network("logistic", encoder.n_inputs, seed=3)
    x = encoder.encode(_rows(encoder.n_players, 4, seed=4))
    weights = network[0].weight.detach().numpy()[0]
    e = explain(_model(network), x, encoder.reference_encoded, encoder.player_of_input,
                linear_weights=weights)
    assert e.method == "closed-form+sampled"
    exact = shapley_from_values(coalition_values(_model(network), x, encoder.reference_encoded,
                                                 encoder.player_of_input))
    np.testing.assert_allclose(e.phi, exact, atol=1e-9)
    np.testing.assert_allclose(e.base + e.phi.sum(axis=1), e.full, atol=1e-9)
    np.testing.assert_allclose(e.base_p + e.phi_p.sum(axis=1), e.p, atol=1e-12)


def test_the_permutation_estimate_is_additive_and_within_its_error() -> None:
    encoder = encoder_for(_schema(MAX_EXACT_PLAYERS))  # 14 players: 16,384 coalitions
    network = _network("mlp", encoder.n_inputs, seed=5)
    x = encoder.encode(_rows(encoder.n_players, 3, seed=6))
    e = explain(_model(network), x, encoder.reference_encoded, encoder.player_of_input)
    assert e.method == "sampled" and e.standard_error > 0
    np.testing.assert_allclose(e.base + e.phi.sum(axis=1), e.full, atol=1e-10)
    np.testing.assert_allclose(e.base_p + e.phi_p.sum(axis=1), e.p, atol=1e-12)
    values = coalition_values(_model(network), x, encoder.reference_encoded,
                              encoder.player_of_input)
    exact_p = shapley_from_values(1.0 / (1.0 + np.exp(-values)))
    assert np.abs(e.phi_p - exact_p).max() <= 5 * e.standard_error + 1e-12


def test_scoring_encodes_and_explains_with_the_models_schema() -> None:
    encoder = encoder_for(_schema(2))
    network = _network("logistic", encoder.n_inputs, seed=7).float()
    raw = _rows(encoder.n_players, 5, seed=8)
    e = explain_rows(network, encoder, raw)
    assert e.phi.shape == (5, encoder.n_players)
    np.testing.assert_allclose(e.base + e.phi.sum(axis=1), e.full, atol=1e-5)


@pytest.mark.parametrize(("contribution", "direction"), [
    (1e-12, "neutral"), (-1e-12, "neutral"), (0.0, "neutral"), (2e-9, "raises"), (-0.3, "lowers"),
])
def test_rounding_is_no_direction(contribution: float, direction: str) -> None:
    assert direction_of(contribution) == direction


def test_an_additive_models_terms_give_its_log_odds_values_past_12_players() -> None:
    """Past the exact enumeration an additive model's log-odds values come from its terms:
    each term minus the reference's, exactly, whatever the player count."""
    d = MAX_EXACT_PLAYERS + 3
    scales = np.linspace(0.5, 2.0, d)

    def terms(rows: np.ndarray) -> np.ndarray:
        return np.sin(rows.astype(np.float64) * scales)

    def log_odds(rows: np.ndarray) -> np.ndarray:
        return 0.25 + terms(rows).sum(axis=1)

    rng = np.random.default_rng(3)
    x, reference = rng.uniform(-1, 1, (4, d)), np.zeros(d)
    e = explain(log_odds, x, reference, np.arange(d), terms=terms)
    assert e.method == "closed-form+sampled"
    np.testing.assert_array_equal(e.phi, terms(x) - terms(reference[None, :]))
    np.testing.assert_allclose(e.base + e.phi.sum(axis=1), e.full, atol=1e-12)
