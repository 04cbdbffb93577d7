"""One-shot mechanisms of DP statistics: the Gaussian and the Laplace mechanism, no subsampling.

A statistics release (``app.statistics``) adds noise to a few vectors of counts and sums, each
with a known sensitivity. The ledger records each noisy vector as a *component*: its noise
multiplier, the noise scale over the vector's sensitivity (Gaussian: standard deviation over
the L2 sensitivity; Laplace: scale b over the L1 sensitivity). From these alone:

* Gaussian components with multipliers s_1..s_k compose, exactly in RDP, to one Gaussian with
  multiplier s = (sum 1 / s_i^2)^(-1/2): RDP(alpha) = alpha / (2 s^2) at every order, i.e.
  rho-zCDP with rho = 1 / (2 s^2) (Bun and Steinke 2016; Mironov 2017). The ledger charges
  ``Mechanism(s, 1.0, 1)``, and its tight epsilon is the exact Gaussian one (Balle and Wang
  2018, ``accounting.gaussian_epsilon``).
* A Laplace component with multiplier b is pure epsilon-DP with epsilon = 1 / b; its RDP is
  Mironov 2017, Proposition 6 (exact, below both epsilon and alpha epsilon^2 / 2). Components
  compose by adding their RDP at each order (the ledger's filter does so at its one order), and
  by adding their epsilons for the pure guarantee.
"""

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

GAUSSIAN = "gaussian"
"""The one-shot Gaussian mechanism: the word the ledger's events and kernels know it by."""
LAPLACE = "laplace"
"""The one-shot Laplace mechanism: the word the ledger's events and kernels know it by."""


def gaussian_multiplier(components: Sequence[float]) -> float:
    """The one Gaussian multiplier that Gaussian components compose to (exact in RDP)."""
    return 1.0 / math.sqrt(sum(1.0 / c**2 for c in components))


def laplace_epsilon(components: Sequence[float]) -> float:
    """Pure epsilon of Laplace components: the sum of 1 / multiplier."""
    return math.fsum(1.0 / c for c in components)


def equivalent_multiplier(kind: str, components: Sequence[float]) -> float:
    """What the ledger entry shows as its noise multiplier: the composed Gaussian's, or for
    Laplace components the multiplier of one Laplace with their summed epsilon."""
    if kind == GAUSSIAN:
        return gaussian_multiplier(components)
    return 1.0 / laplace_epsilon(components)


def laplace_rdp(epsilon: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Laplace mechanism with pure ``epsilon`` (scale / sensitivity = 1 / epsilon)
    at ``orders`` (each > 1): Mironov 2017, Proposition 6, written stably as

    eps + log1p((a - 1) expm1(eps (1 - 2a)) / (2a - 1)) / (a - 1).
    """
    a = np.asarray(orders, dtype=float)
    inner = (a - 1.0) * np.expm1(epsilon * (1.0 - 2.0 * a)) / (2.0 * a - 1.0)
    return epsilon + np.log1p(inner) / (a - 1.0)


def component_rdp(kind: str, components: Sequence[float], orders: np.ndarray) -> np.ndarray:
    """The composed RDP of a release's components at ``orders``."""
    a = np.asarray(orders, dtype=float)
    if kind == GAUSSIAN:
        return a / (2.0 * gaussian_multiplier(components) ** 2)
    total = np.zeros(len(a))
    for c in components:
        total += laplace_rdp(1.0 / c, a)
    return total


def _gaussian_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-GDP (Balle and Wang 2018), increasing in mu."""
    upper = ndtr(-epsilon / mu + mu / 2)
    return float(upper - math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2)))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The largest mu (signal over noise: sensitivity / standard deviation) at which one
    Gaussian mechanism is exactly (``epsilon``, ``delta``)-DP, shrunk by one part in 10^9 so
    that floating-point rounding downstream never lifts the release above its target.

    Args:
        epsilon: in (0, 100].
        delta: in (0, 1).
    """
    low, high = 1e-12, 1.0
    while _gaussian_delta(high, epsilon) < delta:
        high *= 2.0
    mu = float(brentq(lambda m: _gaussian_delta(m, epsilon) - delta, low, high,
                      xtol=1e-15, rtol=1e-14))
    return mu * (1.0 - 1e-9)
