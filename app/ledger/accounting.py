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
from typing import Protocol

import numpy as np
from opacus.accountants import PRVAccountant as OpacusPRVAccountant
from opacus.accountants.analysis.rdp import compute_rdp

# Fixed, public grid of Rényi orders (a filter must not pick orders after seeing the data).
RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)
MIN_NOISE_MULTIPLIER = 0.3  # below this PRV's numerics are unreliable and DP is nominal
MAX_NOISE_MULTIPLIER = 100.0  # beyond this a model learns nothing useful


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
def _rdp_curve_cached(noise_multiplier: float, sample_rate: float, steps: int) -> tuple[float, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": grid is fixed
        curve = compute_rdp(
            q=sample_rate, noise_multiplier=noise_multiplier, steps=steps, orders=list(RDP_ORDERS)
        )
    return tuple(float(v) for v in np.atleast_1d(curve))


def rdp_curve(history: Sequence[Mechanism]) -> np.ndarray:
    """The composed RDP curve (sum over entries) on the fixed order grid."""
    total = np.zeros(len(RDP_ORDERS))
    for m in history:
        if m.steps == 0:
            continue
        if m.non_private:
            return np.full(len(RDP_ORDERS), np.inf)
        total += np.array(_rdp_curve_cached(m.noise_multiplier, m.sample_rate, m.steps))
    return total


def rdp_to_epsilon(curve: np.ndarray, delta: float) -> float:
    """Convert an RDP curve to (epsilon, delta)-DP (Balle et al. 2020, as Opacus and dp-accounting).

    eps = min_a  rdp(a) + log((a-1)/a) - (log(delta) + log(a)) / (a-1)
    """
    orders = np.array(RDP_ORDERS)
    if not np.all(np.isfinite(curve)):
        return math.inf
    if not np.any(curve):  # nothing was spent; the conversion's slack is not a spend
        return 0.0
    eps = curve - (np.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    return float(max(np.nanmin(eps), 0.0))


class RDPAccountant:
    name = "rdp"

    def epsilon(self, history: Sequence[Mechanism], delta: float) -> float:
        return rdp_to_epsilon(rdp_curve(history), delta)


class PRVAccountant:
    """Opacus' PRV accountant; returns its upper bound (estimate + error), never the estimate."""

    name = "prv"

    def __init__(self, eps_error: float = 0.01) -> None:
        self.eps_error = eps_error

    def epsilon(self, history: Sequence[Mechanism], delta: float) -> float:
        live = [m for m in history if m.steps > 0]
        if not live:
            return 0.0
        if any(m.non_private for m in live):
            return math.inf
        return _prv_epsilon(
            tuple((m.noise_multiplier, m.sample_rate, m.steps) for m in live),
            delta,
            self.eps_error,
        )


@lru_cache(maxsize=4096)
def _prv_epsilon(
    history: tuple[tuple[float, float, int], ...], delta: float, eps_error: float
) -> float:
    accountant = OpacusPRVAccountant()
    accountant.history = list(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its RDP-based domain sizing warns about the order grid
        return float(accountant.get_epsilon(delta=delta, eps_error=eps_error))


_REGISTRY: dict[str, type] = {"rdp": RDPAccountant, "prv": PRVAccountant}
ACCOUNTANTS: tuple[str, ...] = tuple(_REGISTRY)


def create_accountant(name: str) -> Accountant:
    """Look an accountant up by name (``rdp`` or ``prv``)."""
    try:
        return _REGISTRY[name]()
    except KeyError as exc:
        raise ValueError(f"unknown accountant {name!r}; known: {sorted(_REGISTRY)}") from exc


class TargetUnreachable(ValueError):
    """No noise multiplier within the allowed range reaches the target epsilon."""


def noise_for_target(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "prv",
    tolerance: float = 0.01,
) -> float:
    """Smallest noise multiplier (within ``tolerance`` in epsilon) whose epsilon <= target.

    Bisection on sigma in [MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER]; the returned sigma
    always satisfies epsilon(sigma) <= target_epsilon for the named accountant.

    Raises:
        TargetUnreachable: the target needs more noise than MAX_NOISE_MULTIPLIER.
    """
    acc = create_accountant(accountant)

    def eps(sigma: float) -> float:
        return acc.epsilon([Mechanism(sigma, sample_rate, steps)], delta)

    if eps(MAX_NOISE_MULTIPLIER) > target_epsilon:
        raise TargetUnreachable(target_epsilon)
    low, high = MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER
    if eps(low) <= target_epsilon:
        return low
    eps_high = eps(high)
    while target_epsilon - eps_high > tolerance and high - low > 1e-4:
        mid = math.sqrt(low * high) if high / low > 2 else (low + high) / 2
        e = eps(mid)
        if e <= target_epsilon:
            high, eps_high = mid, e
        else:
            low = mid
    return high
