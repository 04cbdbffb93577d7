"""Privacy accountants behind one small interface, and the Rényi composition the ledger uses.

Every figure is computed from a mechanism history of (noise multiplier, sample rate, steps) for
the Poisson-subsampled Gaussian mechanism of DP-SGD; an epsilon is never stored on its own.

* ``rdp``: Rényi DP over a fixed grid of orders. Composition by adding RDP curves is sound even
  when each next job is chosen after seeing earlier results, so the ledger's admission (a privacy
  filter) uses it.
* ``prv``: Opacus' privacy-random-variable accountant (numerical, an upper bound within its
  error). Tighter for a single job; reported beside RDP and used to pick noise for a target.
"""

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from opacus.accountants import PRVAccountant as OpacusPRVAccountant
from opacus.accountants.analysis.prv import Domain
from opacus.accountants.analysis.rdp import compute_rdp
from scipy.optimize import brentq
from scipy.special import gammaln, log_ndtr, logsumexp, ndtr

# Fixed, public grid of Rényi orders (a filter must not pick orders after seeing the data).
RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)
MIN_NOISE_MULTIPLIER = 0.3  # below this PRV's numerics are unreliable and DP is nominal
MAX_NOISE_MULTIPLIER = 100.0  # beyond this a model learns nothing useful
# PRV's discretisation grows with sqrt(steps * log(1/delta)) / eps_error points; each point costs
# a few float64 arrays and an FFT. 600,000 points is about 0.25 s and 100 MB on 2 cores; beyond
# it the RDP bound (also a valid upper bound, microseconds to compute) is returned instead.
MAX_PRV_DOMAIN_POINTS = 600_000


@dataclass(frozen=True)
class Mechanism:
    """``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Args:
        noise_multiplier: sigma, noise std divided by the clip norm; 0 means non-private.
        sample_rate: Poisson inclusion probability q of each record per step, in (0, 1].
        steps: number of noisy gradient steps, >= 0.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    @property
    def non_private(self) -> bool:
        return self.noise_multiplier <= 0.0


class Accountant(Protocol):
    name: str

    def epsilon(self, history: Sequence[Mechanism], delta: float) -> float:
        """Epsilon of the composed history at ``delta``; ``inf`` if any entry is non-private."""
        ...


@lru_cache(maxsize=4096)
def _rdp_per_step(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    """One step's RDP on the fixed grid (Opacus' analysis). RDP composes linearly in steps,
    so one curve per (sigma, q) serves every step count: per-epoch commits stay cheap."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": grid is fixed
        curve = compute_rdp(
            q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(RDP_ORDERS)
        )
    curve = np.atleast_1d(np.asarray(curve, dtype=float))
    curve.setflags(write=False)
    return curve


def rdp_curve(history: Sequence[Mechanism]) -> np.ndarray:
    """The composed RDP curve (sum over entries) on the fixed order grid."""
    total = np.zeros(len(RDP_ORDERS))
    for m in history:
        if m.steps == 0:
            continue
        if m.non_private:
            return np.full(len(RDP_ORDERS), np.inf)
        total += m.steps * _rdp_per_step(m.noise_multiplier, m.sample_rate)
    return total


ORDERS = np.array(RDP_ORDERS, dtype=float)
INTEGER_ORDERS = np.array([a for a in RDP_ORDERS if float(a).is_integer()], dtype=float)


def integer_order_rdp(noise_multiplier: float, sample_rate: float, steps: int) -> np.ndarray:
    """RDP at the grid's integer orders in closed form, vectorised (microseconds, not 0.1 s).

    log A_a = logsumexp_i [log C(a, i) + i log q + (a - i) log(1 - q) + (i^2 - i) / (2 s^2)]
    (Mironov et al. 2019, the formula Opacus and dp-accounting use for integer orders). Only
    ever an upper bound on the full grid's epsilon: used to bracket searches and size domains.
    """
    q, sigma = sample_rate, noise_multiplier
    if q >= 1.0:
        return steps * INTEGER_ORDERS / (2 * sigma**2)
    i = np.arange(int(INTEGER_ORDERS.max()) + 1, dtype=float)
    a = INTEGER_ORDERS[:, None]
    log_binom = gammaln(a + 1) - gammaln(i + 1) - gammaln(np.maximum(a - i, 0) + 1)
    terms = log_binom + i * math.log(q) + (a - i) * math.log1p(-q) + (i * i - i) / (2 * sigma**2)
    terms = np.where(i <= a, terms, -np.inf)
    return steps * logsumexp(terms, axis=1) / (INTEGER_ORDERS - 1)


def integer_order_epsilon(history: Sequence[tuple[float, float, int]], delta: float) -> float:
    """Epsilon of (sigma, q, steps) compositions from the integer orders alone.

    Never below the full grid's RDP epsilon (a subset of the same orders), never below PRV.
    """
    curve = np.zeros(len(INTEGER_ORDERS))
    for sigma, q, steps in history:
        curve = curve + integer_order_rdp(sigma, q, steps)
    return rdp_to_epsilon(curve, delta, orders=INTEGER_ORDERS)


def rdp_to_epsilon(curve: np.ndarray, delta: float, orders: np.ndarray | None = None) -> float:
    """Convert an RDP curve to (epsilon, delta)-DP (Balle et al. 2020, as Opacus and dp-accounting).

    eps = min_a  rdp(a) + log((a-1)/a) - (log(delta) + log(a)) / (a-1), over ``orders`` (the
    fixed grid unless given).
    """
    orders = ORDERS if orders is None else orders
    if not np.all(np.isfinite(curve)):
        return math.inf
    if not np.any(curve):  # nothing was spent; the conversion's slack is not a spend
        return 0.0
    eps = curve - (np.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    return float(max(np.nanmin(eps), 0.0))


def finite_or_none(value: float | None) -> float | None:
    """An epsilon as JSON can carry it: infinity (non-private) becomes None."""
    return None if value is None or math.isinf(value) else value


def poisson_plan(n_rows: int, batch_size: int) -> tuple[float, int]:
    """(sample rate, steps per epoch) exactly as Opacus' DPDataLoader derives them.

    The ledger charges this plan and the trainers check they sample by it: one definition.
    """
    sample_rate = 1.0 / math.ceil(n_rows / batch_size)
    return sample_rate, int(1 / sample_rate)


class RDPAccountant:
    name = "rdp"

    def epsilon(self, history: Sequence[Mechanism], delta: float) -> float:
        return rdp_to_epsilon(rdp_curve(history), delta)


class PRVAccountant:
    """Opacus' PRV accountant; returns its upper bound (estimate + error), never the estimate.

    For very small delta (below about 1e-13, depending on the domain) PRV's numerics fail
    (Opacus raises, or divides by zero at denormal delta); the RDP epsilon, also a valid upper
    bound, is returned instead, so an unusual but legal delta is never a server error. The same
    holds when the discretisation would exceed MAX_PRV_DOMAIN_POINTS (very many steps at a tiny
    delta): time and memory stay bounded, and the figure stays an upper bound.
    """

    name = "prv"

    def __init__(self, eps_error: float = 0.01) -> None:
        self.eps_error = eps_error

    def epsilon(self, history: Sequence[Mechanism], delta: float) -> float:
        live = [m for m in history if m.steps > 0]
        if not live:
            return 0.0
        if any(m.non_private for m in live):
            return math.inf
        if all(m.sample_rate >= 1.0 for m in live):
            return gaussian_epsilon(live, delta)
        try:
            return _prv_epsilon(
                tuple((m.noise_multiplier, m.sample_rate, m.steps) for m in live),
                delta,
                self.eps_error,
            )
        except (ValueError, ArithmeticError):
            return RDPAccountant().epsilon(live, delta)


def gaussian_epsilon(history: Sequence[Mechanism], delta: float) -> float:
    """Exact epsilon of composed full-batch (q = 1) Gaussian mechanisms.

    Without subsampling the privacy loss is exactly Gaussian: T steps at noise sigma compose to
    mu-GDP with mu = sqrt(sum T / sigma^2), and (Balle and Wang 2018) the mechanism is
    (eps, delta)-DP iff delta >= Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2). This is the
    value the PRV accountant approximates numerically (to within its eps_error), in microseconds.
    """
    mu = math.sqrt(sum(m.steps / m.noise_multiplier**2 for m in history))

    def excess(eps: float) -> float:
        return float(
            ndtr(-eps / mu + mu / 2) - math.exp(eps + log_ndtr(-eps / mu - mu / 2)) - delta
        )

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2
    return float(brentq(excess, 0.0, high, xtol=1e-12, rtol=1e-12))


class PRVDomainTooLarge(ValueError):
    """PRV would need more than MAX_PRV_DOMAIN_POINTS points: use the RDP bound instead."""


class _FastDomainPRVAccountant(OpacusPRVAccountant):
    """Opacus' PRV accountant with its discretisation domain sized from integer-order RDP.

    Opacus sizes the domain (Gopi et al., remark 5.6) from an RDP epsilon on its default grid,
    whose fractional orders cost ~85% of an evaluation. Any valid RDP bound gives a safe domain;
    the integer orders' bound is valid and at least as large, so the domain is never smaller.
    Everything else (truncation, discretisation, composition, the error bound) is Opacus'.
    """

    def _get_domain(
        self,
        prvs: Sequence[Any],
        num_self_compositions: Sequence[int],
        eps_error: float,
        delta_error: float,
    ) -> Domain:
        total = sum(num_self_compositions)
        bound = max(
            integer_order_epsilon(self.history, delta_error / 4),
            *(
                integer_order_epsilon([(sigma, q, 1)], delta_error / (8 * total))
                for sigma, q, _ in self.history
            ),
        )
        size = max(bound, eps_error) + 3
        mesh = eps_error / np.sqrt(total * np.log(12 / delta_error) / 2)
        if 2 * size / mesh > MAX_PRV_DOMAIN_POINTS:
            raise PRVDomainTooLarge(f"{2 * size / mesh:.3g} points")
        return Domain.create_aligned(-size, size, mesh)


@lru_cache(maxsize=4096)
def _prv_epsilon(
    history: tuple[tuple[float, float, int], ...], delta: float, eps_error: float
) -> float:
    accountant = _FastDomainPRVAccountant()
    accountant.history = list(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(accountant.get_epsilon(delta=delta, eps_error=eps_error))


_REGISTRY: dict[str, type] = {"rdp": RDPAccountant, "prv": PRVAccountant}
ACCOUNTANTS: tuple[str, ...] = tuple(_REGISTRY)


def epsilon_by_accountant(history: Sequence[Mechanism], delta: float) -> dict[str, float]:
    """The history's epsilon at ``delta`` by every registered accountant (``inf``: non-private).

    The one place a job's figures are computed for each accountant: the ledger records them
    with its entry, the job view and the reports show them.
    """
    return {name: create_accountant(name).epsilon(history, delta) for name in ACCOUNTANTS}


def create_accountant(name: str) -> Accountant:
    """Look an accountant up by name (``rdp`` or ``prv``)."""
    try:
        return _REGISTRY[name]()
    except KeyError as exc:
        raise ValueError(f"unknown accountant {name!r}; known: {sorted(_REGISTRY)}") from exc
