"""DP-EBM's planned event: interpret's own noise, and what dp-accounting says it spends."""

import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from app.families.ebm_accounting import (
    EbmRecipe,
    NoiseMismatch,
    _split,
    gdp_mu,
    plan,
)
from app.privacy.accounting import Mechanism, epsilon_by_accountant, gaussian_epsilon

privacy = pytest.importorskip("interpret.utils._privacy")

CASES = [(1.0, 1e-5, 6, "gdp"), (0.5, 1e-6, 6, "gdp"), (4.0, 1e-5, 20, "gdp"),
         (8.0, 1e-5, 3, "gdp"), (1.0, 1e-5, 6, "classic")]


def _interpret_noise(recipe: EbmRecipe, library_epsilon: float) -> tuple[float, float]:
    """The noise interpret's own formulas give at its epsilon (``EBMModel.fit``)."""
    bin_eps, half = library_epsilon * recipe.bin_budget_frac, recipe.delta / 2
    queries = recipe.boosting_queries
    if recipe.composition == "gdp":
        return (privacy.calc_gdp_noise_multi(recipe.n_features, bin_eps, half),
                privacy.calc_gdp_noise_multi(queries, library_epsilon - bin_eps, half)
                * recipe.learning_rate)
    return (privacy.calc_classic_noise_multi(recipe.n_features, bin_eps, half, 1.0),
            privacy.calc_classic_noise_multi(queries, library_epsilon - bin_eps, half,
                                             recipe.learning_rate))


@pytest.mark.parametrize(("epsilon", "delta", "features", "composition"), CASES)
def test_planned_noise_is_interprets(epsilon: float, delta: float, features: int,
                                     composition: str) -> None:
    recipe = EbmRecipe(epsilon, delta, features, composition=composition)  # type: ignore[arg-type]
    noise = plan(recipe)
    binning, boosting = _interpret_noise(recipe, noise.library_epsilon)
    noise.check(binning=binning, boosting=boosting)
    assert binning == pytest.approx(noise.binning, rel=1e-9)
    assert boosting == pytest.approx(noise.boosting, rel=1e-9)


@pytest.mark.parametrize(("epsilon", "delta", "features", "composition"), CASES)
def test_event_spends_the_target(epsilon: float, delta: float, features: int,
                                 composition: str) -> None:
    """dp-accounting's PLD of the event sits on the target (its discretisation errs high), its
    RDP above; the service's headline accountant gives the target."""
    noise = plan(EbmRecipe(epsilon, delta, features, composition=composition))  # type: ignore[arg-type]
    pld = PLDAccountant()
    pld.compose(noise.event)
    rdp = RdpAccountant()
    rdp.compose(noise.event)
    assert epsilon <= pld.get_epsilon(delta) <= epsilon * (1 + 1e-4)
    assert rdp.get_epsilon(delta) >= epsilon
    ours = epsilon_by_accountant([noise.event], delta)
    assert ours["prv"] == pytest.approx(epsilon, rel=1e-9)
    assert ours["rdp"] >= epsilon


@pytest.mark.parametrize(("epsilon", "delta", "features"), [c[:3] for c in CASES[:4]])
def test_each_part_spends_what_interpret_claims_for_it(epsilon: float, delta: float,
                                                       features: int) -> None:
    """Each part of the event, alone at its half of delta, is exactly as private as interpret
    says it is (its GDP calibration); only their composition is tighter than interpret's sum,
    which is why interpret is handed more than the target."""
    recipe = EbmRecipe(epsilon, delta, features)
    noise = plan(recipe)
    claimed_binning = noise.library_epsilon * recipe.bin_budget_frac
    binning = gaussian_epsilon([Mechanism(noise.binning, 1.0, features)], delta / 2)
    boosting = gaussian_epsilon([Mechanism(noise.boosting / recipe.learning_rate, 1.0,
                                           recipe.boosting_queries)], delta / 2)
    assert binning == pytest.approx(claimed_binning, rel=1e-7)
    assert boosting == pytest.approx(noise.library_epsilon - claimed_binning, rel=1e-7)
    assert epsilon < binning + boosting == pytest.approx(noise.library_epsilon, rel=1e-7)


def test_interpret_at_the_target_would_spend_less() -> None:
    """Handing interpret the target itself leaves budget unspent (0.87 of 1 here)."""
    recipe = EbmRecipe(1.0, 1e-5, 6)
    binning, boosting = _split(recipe, 1.0)
    spent = gaussian_epsilon([Mechanism(binning, 1.0, 6),
                              Mechanism(boosting / 0.01, 1.0, recipe.boosting_queries)], 1e-5)
    assert 0.85 < spent < 0.9


def test_gdp_mu_inverts_the_gaussian_curve() -> None:
    mu = gdp_mu(1.0, 1e-5)
    assert gaussian_epsilon([Mechanism(1 / mu, 1.0, 1)], 1e-5) == pytest.approx(1.0, rel=1e-12)


def test_a_fitted_noise_off_the_plan_is_refused() -> None:
    noise = plan(EbmRecipe(1.0, 1e-5, 6))
    with pytest.raises(NoiseMismatch, match="boosting"):
        noise.check(binning=noise.binning, boosting=noise.boosting * (1 - 1e-6))
    with pytest.raises(NoiseMismatch, match="binning"):
        noise.check(binning=noise.binning * 1.01, boosting=noise.boosting)


@pytest.mark.parametrize("bad", [dict(epsilon=0.0), dict(delta=1.0), dict(n_features=0),
                                 dict(bin_budget_frac=1.0), dict(epsilon=float("inf"))])
def test_recipe_refuses_what_interpret_cannot_run(bad: dict[str, float]) -> None:
    base = dict(epsilon=1.0, delta=1e-5, n_features=3) | bad
    with pytest.raises(ValueError):
        EbmRecipe(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epsilon", "delta", "features", "composition"), CASES[:3])
def test_charged_event_is_the_releases_composed(epsilon: float, delta: float, features: int,
                                                composition: str) -> None:
    """Each part's k Gaussians charged as one of multiplier sigma / sqrt(k): the same RDP at
    every order, the same PLD epsilon."""
    noise = plan(EbmRecipe(epsilon, delta, features, composition=composition))  # type: ignore[arg-type]
    figures = []
    for event in (noise.releases, noise.event):
        rdp = RdpAccountant()
        rdp.compose(event)
        pld = PLDAccountant()
        pld.compose(event)
        figures.append((rdp.get_epsilon(delta), pld.get_epsilon(delta)))
    assert figures[0][0] == pytest.approx(figures[1][0], rel=1e-12)
    assert figures[0][1] == pytest.approx(figures[1][1], rel=1e-4)
