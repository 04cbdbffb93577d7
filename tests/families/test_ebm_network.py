"""A fitted DP-EBM as a torch network over encoded inputs: the same log-odds as interpret's
``decision_function``, bins from the declaration only, one row per patient."""

import numpy as np
import pytest
import torch

from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import encoder_for
from app.families.ebm_accounting import EbmRecipe, plan
from app.families.ebm_layout import LOG_ODDS_STRETCH, interpret_rows, layout

pytest.importorskip("interpret")
from app.families.ebm_network import (  # noqa: E402
    AdditiveNetwork,
    MultiRowPatients,
    additive_network,
    fit_ebm,
)

SCHEMA = DatasetSchema.model_validate({"features": [
    {"name": "score", "kind": "numeric", "lower": 0, "upper": 10, "reference": 5},
    {"name": "visits", "kind": "integer", "lower": 0, "upper": 50, "model_upper": 31,
     "reference": 4},
    {"name": "site", "kind": "categorical", "categories": ["north", "south", "east", "west"],
     "reference": "north"},
    {"name": "flag", "kind": "binary", "reference": 0},
], "outcome": {"name": "y"}})


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows over the whole declared ranges (visits past the model range too) and
    outcomes that depend on every feature."""
    rng = np.random.default_rng(seed)
    raw = np.column_stack([rng.uniform(0, 10, n), rng.integers(0, 51, n),
                           rng.integers(0, 4, n), rng.integers(0, 2, n)]).astype(float)
    z = (raw[:, 0] - 5) / 2 + np.minimum(raw[:, 1], 31) / 15 - 1 + (raw[:, 2] == 2) - raw[:, 3]
    return raw, (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)


@pytest.fixture(scope="module")
def fitted():  # type: ignore[no-untyped-def]
    raw, y = _rows(2000, seed=1)
    recipe = EbmRecipe(epsilon=8.0, delta=1e-5, n_features=4, max_rounds=40)
    return fit_ebm(SCHEMA, raw, y, plan(recipe), random_state=7)


def test_bounds_and_types_come_from_the_declaration() -> None:
    spec = layout(SCHEMA)
    assert spec.feature_types == ["continuous"] * 4
    assert spec.privacy_bounds == {0: (0.0, 10.0), 1: (0.0, 31.0), 2: (-0.5, 3.5),
                                   3: (-0.5, 1.5)}
    rows = interpret_rows(SCHEMA, np.array([[11.0, 50.0, 3.0, 1.0]]))
    np.testing.assert_array_equal(rows, [[10.0, 31.0, 3.0, 1.0]])


def test_network_logit_is_interprets_decision_function(fitted) -> None:  # type: ignore[no-untyped-def]
    encoder = encoder_for(SCHEMA)
    network = additive_network(encoder, fitted.tables)
    raw, _ = _rows(5000, seed=2)
    # every integer value, each bin's cuts exactly, and codes: the ties fall as in interpret
    cuts = fitted.tables.cuts[1]
    ties = np.tile(encoder.reference_raw, (len(cuts), 1))
    ties[:, 1] = cuts
    raw = np.concatenate([raw, ties])
    expected = fitted.model.decision_function(interpret_rows(SCHEMA, raw))
    for dtype, atol in ((np.float64, 1e-9), (np.float32, 1e-6)):
        with torch.no_grad():
            got = network(torch.from_numpy(encoder.encode(raw).astype(dtype)))
        np.testing.assert_allclose(got.double().numpy()[:, 0], expected, rtol=0, atol=atol)
    np.testing.assert_allclose(fitted.tables.log_odds(interpret_rows(SCHEMA, raw)), expected,
                               atol=1e-12)


def test_stretched_tables_scale_the_terms_and_keep_the_intercept(fitted) -> None:  # type: ignore[no-untyped-def]
    """The served network: interpret's terms times the public stretch, its intercept as is,
    and its terms still summing to its log-odds (the contributions stay exact)."""
    encoder = encoder_for(SCHEMA)
    network = additive_network(encoder, fitted.tables.stretched(LOG_ODDS_STRETCH))
    raw, _ = _rows(500, seed=4)
    intercept = fitted.tables.intercept
    expected = intercept + LOG_ODDS_STRETCH * (
        fitted.model.decision_function(interpret_rows(SCHEMA, raw)) - intercept)
    x = torch.from_numpy(encoder.encode(raw))
    with torch.no_grad():
        got = network(x).numpy()[:, 0]
        terms = network.terms(x).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(intercept + terms.sum(axis=1), got, rtol=0, atol=1e-9)
    assert LOG_ODDS_STRETCH > 1.0  # the compressed fit is stretched, never shrunk


def test_network_round_trips_its_state(fitted) -> None:  # type: ignore[no-untyped-def]
    network = additive_network(encoder_for(SCHEMA), fitted.tables)
    empty = AdditiveNetwork.from_specs(network.term_specs())
    empty.load_state_dict(network.state_dict())
    x = torch.from_numpy(encoder_for(SCHEMA).encode(_rows(50, seed=3)[0]))
    torch.testing.assert_close(empty(x), network(x))


def test_fitted_noise_is_the_planned_noise(fitted) -> None:  # type: ignore[no-untyped-def]
    assert fitted.model.noise_scale_binning_ == pytest.approx(fitted.noise.binning, rel=1e-9)
    assert fitted.model.noise_scale_boosting_ == pytest.approx(fitted.noise.boosting, rel=1e-9)
    assert fitted.model.epsilon == fitted.noise.library_epsilon


def test_a_patient_with_two_rows_is_refused() -> None:
    raw, y = _rows(20, seed=4)
    ids = [str(i) for i in range(19)] + ["3"]
    with pytest.raises(MultiRowPatients):
        fit_ebm(SCHEMA, raw, y, plan(EbmRecipe(1.0, 1e-5, 4, max_rounds=2)),
                patient_ids=ids)


def test_cuts_lie_on_the_public_grid_whatever_the_rows() -> None:
    """Every cut is an edge of the declared range's fixed grid (interpret's private numeric
    binning: 2 (max_bins - 1) equal cells), so no category or value is read off the rows;
    a patient with a category nobody else has moves at most a noisy count. (Interpret's
    nominal binning would release a bin per category present instead.)"""
    raw, y = _rows(400, seed=5)
    raw[:, 2] = np.where(raw[:, 2] == 3, 0, raw[:, 2])  # nobody in "west"
    recipe = EbmRecipe(8.0, 1e-5, 4, max_rounds=2)
    fits = [fit_ebm(SCHEMA, raw, y, plan(recipe))]
    raw[0, 2] = 3
    fits.append(fit_ebm(SCHEMA, raw, y, plan(recipe)))
    spec = layout(SCHEMA)
    for fitted in fits:
        for j, cuts in enumerate(fitted.tables.cuts):
            lower, upper = spec.privacy_bounds[j]
            grid = np.linspace(lower, upper, 2 * (recipe.max_bins - 1) + 1)
            assert np.isin(cuts, grid).all()
            assert len(fitted.tables.scores[j]) == len(cuts) + 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_contributions_are_the_terms_and_the_exact_shapley_values(fitted, dtype) -> None:  # type: ignore[no-untyped-def]
    """The terms' differences from the reference are what the exact coalition enumeration
    gives (an additive model's Shapley values), and add up to the log-odds."""
    from app.scoring.explain import explain

    encoder = encoder_for(SCHEMA)
    network = additive_network(encoder, fitted.tables)

    def log_odds(rows: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return network(torch.from_numpy(rows)).double().numpy()[:, 0]

    x = encoder.encode(_rows(6, seed=9)[0]).astype(dtype)
    reference = encoder.reference_encoded.astype(dtype)
    enumerated = explain(log_odds, x, reference, encoder.player_of_input)
    from_terms = explain(log_odds, x, reference, encoder.player_of_input,
                         terms=network.numpy_terms)
    atol = 1e-12 if dtype is np.float64 else 1e-5
    np.testing.assert_allclose(from_terms.phi, enumerated.phi, rtol=0, atol=atol)
    np.testing.assert_allclose(from_terms.base + from_terms.phi.sum(axis=1), from_terms.full,
                               rtol=0, atol=atol)
    expected = network.numpy_terms(x) - network.numpy_terms(reference[None, :])
    np.testing.assert_array_equal(from_terms.phi, expected)
    at_reference = explain(log_odds, reference[None, :], reference, encoder.player_of_input,
                           terms=network.numpy_terms)
    assert (at_reference.phi == 0).all()  # exactly: no float noise to read as a direction


def test_the_bins_merge_at_the_public_size_not_the_rows_given() -> None:
    """The merge threshold is (public size) / max_bins: a public size far above the rows
    given merges every cell into one bin (the noisy counts cannot reach it), while the rows
    themselves would have cut; the padding never reaches the boosting (the fit still runs on
    the rows given)."""
    raw, y = _rows(400, seed=6)
    recipe = EbmRecipe(8.0, 1e-5, 4, max_rounds=2)
    own = fit_ebm(SCHEMA, raw, y, plan(recipe), public_rows=400, random_state=1)
    assert any(len(cuts) for cuts in own.tables.cuts)
    public = fit_ebm(SCHEMA, raw, y, plan(recipe), public_rows=400 * 100, random_state=1)
    assert all(len(cuts) == 0 for cuts in public.tables.cuts)
    from interpret.utils import _preprocessor
    from interpret.utils._privacy import private_numeric_binning

    assert _preprocessor.private_numeric_binning is private_numeric_binning  # restored
    unpadded = fit_ebm(SCHEMA, raw, y, plan(recipe), random_state=1)
    for a, b in zip(own.tables.cuts, unpadded.tables.cuts, strict=True):
        np.testing.assert_array_equal(a, b)  # public size = rows given: interpret's own bins


def test_a_single_class_part_still_gets_the_noisy_fit() -> None:
    """Interpret fits a noiseless one-class model when every outcome is equal; the public
    anchors make it run its charged mechanism on every table, so the fit neither fails nor
    reveals that the part had one class."""
    raw, _ = _rows(300, seed=5)
    fitted_once = fit_ebm(SCHEMA, raw, np.zeros(300, dtype=int),
                          plan(EbmRecipe(1.0, 1e-5, 4, max_rounds=5)))
    assert list(fitted_once.model.classes_) == [0, 1]
    assert np.isfinite(fitted_once.tables.intercept)
    assert np.isfinite(fitted_once.tables.log_odds(interpret_rows(SCHEMA, raw))).all()


def test_a_part_with_rows_left_out_does_the_public_size_s_work(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Rows read below the public size are made up by a discarded fit on public rows, so a
    fit's duration follows the public size, not how many patients were left out."""
    from app.families import ebm_network

    sizes: list[int] = []
    real = ebm_network._ballast
    monkeypatch.setattr(ebm_network, "_ballast",
                        lambda schema, noise, rows: (sizes.append(rows), real(schema, noise, rows)))
    raw, y = _rows(150, seed=6)
    recipe = EbmRecipe(1.0, 1e-5, 4, max_rounds=3)
    fit_ebm(SCHEMA, raw, y, plan(recipe), public_rows=200)
    fit_ebm(SCHEMA, raw, y, plan(recipe), public_rows=150)
    fit_ebm(SCHEMA, raw, y, plan(recipe))  # a public table: its rows are its size
    assert sizes == [50, 0]
