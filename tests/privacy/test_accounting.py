"""The privacy accountants against independent references (Opacus, Google's dp-accounting)."""

import itertools
import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from opacus.accountants import RDPAccountant as OpacusRDPAccountant
from scipy import stats
from scipy.special import logsumexp

from app.privacy.accounting import (
    ACCOUNTANTS,
    MAX_NOISE_MULTIPLIER,
    RDP_ORDERS,
    Mechanism,
    PRVAccountant,
    RDPAccountant,
    create_accountant,
    rdp_curve,
    rdp_to_epsilon,
)
from app.privacy.noise import TargetUnreachable, noise_for_target

DELTA = 1e-5
GRID = list(itertools.product([0.01, 0.0909, 0.2], [0.8, 1.0, 2.0, 5.0], [100, 1000]))
GRID_IDS = [f"q={q}-sigma={s}-steps={t}" for q, s, t in GRID]

# dp-accounting 0.6.0 sums the absolute values of the (alternating-sign) binomial series in
# ``_compute_log_a_frac`` and drops orders whose series does not converge, so at fractional
# orders with little noise / a large sample rate its RDP is an *over*-estimate (conservative).
# Ours (Opacus' analysis) is exact there; test_rdp_fractional_orders_are_exact checks that
# against numerical integration. On these grid points the two epsilons differ by more than 0.1%.
DP_ACCOUNTING_FRACTIONAL_DRIFT = {
    (0.0909, 0.8, 100),
    (0.0909, 0.8, 1000),
    (0.2, 0.8, 100),
    (0.2, 0.8, 1000),
    (0.2, 1.0, 100),
    (0.2, 1.0, 1000),
    (0.2, 2.0, 1000),
}


def _rdp(sigma: float, q: float, steps: int) -> float:
    return RDPAccountant().epsilon([Mechanism(sigma, q, steps)], DELTA)


def _prv(sigma: float, q: float, steps: int) -> float:
    return PRVAccountant().epsilon([Mechanism(sigma, q, steps)], DELTA)


def _opacus(sigma: float, q: float, steps: int, alphas: list[float] | None = None):
    acc = OpacusRDPAccountant()
    acc.history = [(sigma, q, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha"
        return acc.get_privacy_spent(delta=DELTA, alphas=alphas)


def _dp_event(sigma: float, q: float, steps: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


def _dp_accounting_rdp(sigma: float, q: float, steps: int, orders: list[float]) -> float:
    acc = RdpAccountant(orders=orders)
    acc.compose(_dp_event(sigma, q, steps))
    return acc.get_epsilon(DELTA)


# --- RDP against Opacus ------------------------------------------------------------------------


@pytest.mark.slow  # seconds of accountant comparisons: the full suite runs it
@pytest.mark.parametrize(("q", "sigma", "steps"), GRID, ids=GRID_IDS)
def test_rdp_matches_opacus(q: float, sigma: float, steps: int) -> None:
    ours = _rdp(sigma, q, steps)
    theirs, _ = _opacus(sigma, q, steps)
    # Our order grid is a superset of Opacus' default one: never looser.
    assert set(OpacusRDPAccountant.DEFAULT_ALPHAS) <= set(RDP_ORDERS)
    assert ours <= theirs + 1e-9
    # On the same orders the two are the same computation.
    same_orders, best_order = _opacus(sigma, q, steps, alphas=list(RDP_ORDERS))
    assert ours == pytest.approx(same_orders, rel=1e-9)
    # Where the optimal order lies inside Opacus' default grid the figures agree within 1%.
    # (Beyond it, e.g. q=0.01 sigma=5 steps=100 where the best order is 128, ours is tighter.)
    if best_order <= max(OpacusRDPAccountant.DEFAULT_ALPHAS):
        assert ours == pytest.approx(theirs, rel=0.01)


def test_rdp_beyond_opacus_orders_is_tighter() -> None:
    """The one grid point whose optimum lies past Opacus' largest default order (63)."""
    ours = _rdp(5.0, 0.01, 100)
    theirs, _ = _opacus(5.0, 0.01, 100)
    _, best_order = _opacus(5.0, 0.01, 100, alphas=list(RDP_ORDERS))
    assert best_order > 63
    assert ours < theirs


# --- RDP against dp-accounting -----------------------------------------------------------------


@pytest.mark.slow  # seconds of accountant comparisons: the full suite runs it
@pytest.mark.parametrize(("q", "sigma", "steps"), GRID, ids=GRID_IDS)
def test_rdp_matches_dp_accounting_same_orders(q: float, sigma: float, steps: int) -> None:
    ours = _rdp(sigma, q, steps)
    theirs = _dp_accounting_rdp(sigma, q, steps, list(RDP_ORDERS))
    assert ours <= theirs * (1 + 1e-9) + 1e-12  # never looser than the reference
    if (q, sigma, steps) in DP_ACCOUNTING_FRACTIONAL_DRIFT:
        # Tighter than dp-accounting's RDP, yet still a valid bound: above the (near-exact)
        # privacy-loss-distribution epsilon.
        pld = PLDAccountant(value_discretization_interval=1e-2)
        pld.compose(_dp_event(sigma, q, steps))
        assert ours >= 0.99 * pld.get_epsilon(DELTA)
    else:
        assert ours == pytest.approx(theirs, rel=1e-3)


@pytest.mark.parametrize(("q", "sigma", "steps"), GRID, ids=GRID_IDS)
def test_rdp_matches_dp_accounting_on_integer_orders(q: float, sigma: float, steps: int) -> None:
    """Integer orders use the same closed form in both libraries: must agree to rounding."""
    integer = np.array([float(a).is_integer() for a in RDP_ORDERS])
    curve = rdp_curve([Mechanism(sigma, q, steps)])
    masked = np.where(integer, curve, 1e300)  # finite but never the minimiser
    ours = rdp_to_epsilon(masked, DELTA)
    theirs = _dp_accounting_rdp(sigma, q, steps, [a for a in RDP_ORDERS if float(a).is_integer()])
    assert ours == pytest.approx(theirs, rel=1e-6)


def _numerical_rdp(q: float, sigma: float, orders: np.ndarray) -> np.ndarray:
    """Per-step RDP of the Poisson-subsampled Gaussian by direct integration:
    log E_{z~N(0,s^2)} [((1-q) + q exp((2z-1)/(2 s^2)))^a] / (a-1)."""
    z, dz = np.linspace(-40 * sigma, 40 * sigma + 1, 400_001, retstep=True)
    log_mu0 = stats.norm.logpdf(z, 0, sigma)
    log_mu = np.logaddexp(np.log1p(-q) + log_mu0, np.log(q) + stats.norm.logpdf(z, 1, sigma))
    return np.array(
        [(logsumexp(a * log_mu + (1 - a) * log_mu0) + np.log(dz)) / (a - 1) for a in orders]
    )


@pytest.mark.parametrize(
    ("q", "sigma"), sorted({(q, s) for q, s, _ in DP_ACCOUNTING_FRACTIONAL_DRIFT})
)
def test_rdp_fractional_orders_are_exact(q: float, sigma: float) -> None:
    """Where dp-accounting drifts, our per-step RDP equals numerical integration."""
    orders = np.array(RDP_ORDERS)
    pick = np.isin(orders, [1.1, 1.3, 1.5, 1.7, 1.9, 2.0, 2.3, 2.5, 3.4, 4.5])
    ours = rdp_curve([Mechanism(sigma, q, 1)])[pick]
    np.testing.assert_allclose(ours, _numerical_rdp(q, sigma, orders[pick]), rtol=1e-6)


# --- the headline (key prv) against dp-accounting's PLD --------------------------------------

PRV_GRID = [
    (0.0909, 1.0, 100),
    (0.01, 1.0, 1000),
    (0.2, 2.0, 100),
    (0.0909, 5.0, 1000),
    (0.0909, 0.8, 220),
]


@pytest.mark.parametrize(("q", "sigma", "steps"), PRV_GRID)
def test_prv_matches_dp_accounting_pld(q: float, sigma: float, steps: int) -> None:
    ours = _prv(sigma, q, steps)
    pld = PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(_dp_event(sigma, q, steps))
    theirs = pld.get_epsilon(DELTA)
    assert ours >= theirs * (1 - 0.02)
    assert ours == pytest.approx(theirs, rel=0.02)
    # PRV is the tighter accountant; RDP is a valid but looser bound.
    assert ours <= _rdp(sigma, q, steps)


# --- composition and edge cases ----------------------------------------------------------------


def test_rdp_composition_is_subadditive_and_monotone() -> None:
    m1 = Mechanism(1.0, 0.0909, 220)
    m2 = Mechanism(2.0, 0.05, 500)
    acc = RDPAccountant()
    e1 = acc.epsilon([m1], DELTA)
    e2 = acc.epsilon([m2], DELTA)
    both = acc.epsilon([m1, m2], DELTA)
    assert both <= e1 + e2
    assert both >= max(e1, e2)
    assert acc.epsilon([m2, m1], DELTA) == pytest.approx(both, rel=1e-12)
    np.testing.assert_allclose(rdp_curve([m1, m2]), rdp_curve([m1]) + rdp_curve([m2]), rtol=1e-12)


def test_rdp_of_repeated_job_equals_one_longer_job() -> None:
    once = rdp_curve([Mechanism(1.2, 0.1, 300)])
    twice = rdp_curve([Mechanism(1.2, 0.1, 100), Mechanism(1.2, 0.1, 200)])
    np.testing.assert_allclose(once, twice, rtol=1e-9)


def test_epsilon_grows_with_steps_and_shrinks_with_noise() -> None:
    assert _rdp(1.0, 0.05, 100) < _rdp(1.0, 0.05, 200)
    assert _rdp(1.0, 0.05, 100) > _rdp(2.0, 0.05, 100)
    assert _prv(1.0, 0.05, 100) < _prv(1.0, 0.05, 200)
    assert _prv(1.0, 0.05, 100) > _prv(2.0, 0.05, 100)


@pytest.mark.parametrize("name", ["rdp", "prv"])
def test_non_private_mechanism_is_infinite(name: str) -> None:
    acc = create_accountant(name)
    non_private = Mechanism(0.0, 0.1, 100)
    assert non_private.non_private
    assert math.isinf(acc.epsilon([non_private], DELTA))
    assert math.isinf(acc.epsilon([Mechanism(1.0, 0.1, 100), non_private], DELTA))


@pytest.mark.parametrize("name", ["rdp", "prv"])
@pytest.mark.parametrize("history", [[], [Mechanism(1.0, 0.1, 0)]], ids=["empty", "zero-steps"])
def test_empty_history_spends_nothing(name: str, history: list[Mechanism]) -> None:
    # Reference: dp-accounting reports exactly 0 for a history with no events.
    assert RdpAccountant(orders=list(RDP_ORDERS)).get_epsilon(DELTA) == 0
    assert create_accountant(name).epsilon(history, DELTA) == 0.0


def test_create_accountant() -> None:
    assert set(ACCOUNTANTS) == {"rdp", "prv"}
    assert isinstance(create_accountant("rdp"), RDPAccountant)
    assert isinstance(create_accountant("prv"), PRVAccountant)
    assert create_accountant("rdp").name == "rdp"
    assert create_accountant("prv").name == "prv"
    # "pld" is the headline figure's name people read; "prv" its deprecated alias (one release).
    assert isinstance(create_accountant("pld"), PRVAccountant)
    with pytest.raises(ValueError, match="nope"):
        create_accountant("nope")


# --- noise for a target epsilon ----------------------------------------------------------------


@pytest.mark.parametrize("accountant", ["prv", "rdp"])
@pytest.mark.parametrize("target", [1.0, 3.0, 8.0])
def test_noise_for_target_is_safe_and_tight(accountant: str, target: float) -> None:
    q, steps = 1 / 11, 220
    sigma = noise_for_target(
        target_epsilon=target, delta=DELTA, sample_rate=q, steps=steps, accountant=accountant
    )
    eps = create_accountant(accountant).epsilon([Mechanism(sigma, q, steps)], DELTA)
    assert eps <= target
    assert eps > target - 0.05


def test_noise_for_target_defaults_to_prv() -> None:
    kwargs = {"target_epsilon": 3.0, "delta": DELTA, "sample_rate": 1 / 11, "steps": 220}
    assert noise_for_target(**kwargs) == noise_for_target(**kwargs, accountant="prv")


def test_noise_for_target_unreachable() -> None:
    with pytest.raises(TargetUnreachable):
        noise_for_target(target_epsilon=0.001, delta=DELTA, sample_rate=1 / 11, steps=20_000)
    assert issubclass(TargetUnreachable, ValueError)
    assert MAX_NOISE_MULTIPLIER == 100.0


def test_noise_for_target_unknown_accountant() -> None:
    with pytest.raises(ValueError):
        noise_for_target(
            target_epsilon=1.0, delta=DELTA, sample_rate=0.1, steps=10, accountant="nope"
        )


# --- the fast paths: closed-form integer orders, the headline PLD, the noise search -----------


@pytest.mark.parametrize(("q", "sigma", "steps"), GRID, ids=GRID_IDS)
def test_integer_order_rdp_equals_opacus(q: float, sigma: float, steps: int) -> None:
    from opacus.accountants.analysis.rdp import compute_rdp

    from app.privacy.accounting import INTEGER_ORDERS, integer_order_rdp

    theirs = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=list(INTEGER_ORDERS))
    np.testing.assert_allclose(integer_order_rdp(sigma, q, steps), theirs, rtol=1e-9)


@pytest.mark.parametrize(("q", "sigma", "steps"), PRV_GRID)
def test_headline_lies_within_opacus_prv_bounds(q: float, sigma: float, steps: int) -> None:
    """The headline (now dp-accounting's PLD) against Opacus' PRV, an independent numerical
    accountant: above its lower bound on the true epsilon, below its upper bound (the old
    headline, estimate + eps_error)."""
    from opacus.accountants import PRVAccountant as OpacusPRV

    stock = OpacusPRV()
    stock.history = [(sigma, q, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dprv = stock._get_dprv(eps_error=0.01, delta_error=DELTA / 1000)
        lower, _, upper = dprv.compute_epsilon(DELTA, DELTA / 1000, 0.01)
    assert lower <= _prv(sigma, q, steps) <= upper


def test_integer_order_epsilon_bounds_both_accountants() -> None:
    from app.privacy.accounting import integer_order_epsilon

    for q, sigma, steps in PRV_GRID:
        bound = integer_order_epsilon([(sigma, q, steps)], DELTA)
        assert bound >= _rdp(sigma, q, steps) - 1e-12
        assert bound >= _prv(sigma, q, steps)


@pytest.mark.slow  # seconds of accountant comparisons: the full suite runs it
@pytest.mark.parametrize("target", [0.5, 2.0, 6.0])
def test_noise_search_matches_plain_bisection(target: float) -> None:
    q, steps = 1 / 6, 18
    fast = noise_for_target(target_epsilon=target, delta=DELTA, sample_rate=q, steps=steps)
    low, high = 0.3, 100.0
    while high - low > 1e-4:
        mid = (low + high) / 2
        if _prv(mid, q, steps) <= target:
            high = mid
        else:
            low = mid
    assert _prv(fast, q, steps) <= target
    assert fast == pytest.approx(high, rel=0.01)  # within the epsilon tolerance's worth


@pytest.mark.slow  # seconds of accountant comparisons: the full suite runs it
@pytest.mark.parametrize(("sigma", "steps"), [(84.2, 500), (13.4, 500), (1.0, 10), (5.0, 1)])
def test_full_batch_epsilon_is_the_exact_gaussian_one(sigma: float, steps: int) -> None:
    """q = 1: closed form; Opacus' numerical PRV upper bound sits within its eps_error above."""
    from opacus.accountants import PRVAccountant as OpacusPRV

    stock = OpacusPRV()
    stock.history = [(sigma, 1.0, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upper = stock.get_epsilon(delta=DELTA, eps_error=0.01)
    exact = _prv(sigma, 1.0, steps)
    assert upper - 0.02 <= exact <= upper
    pld = PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), steps))
    assert exact == pytest.approx(pld.get_epsilon(DELTA), rel=0.01)
