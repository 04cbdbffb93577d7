"""The ledger's privacy filter: a Rényi filter at one fixed order per dataset.

Why one order. The composition of adaptively chosen mechanisms, each picked after seeing the
earlier ones' outputs, is (alpha, B)-RDP when the sum of their RDP at the *fixed* order alpha
never exceeds B (the Rényi filter: Feldman and Zrnic, "Individual Privacy Accounting via a
Rényi Filter", NeurIPS 2021; Lécuyer, "Practical Privacy Filters and Odometers with Rényi
Differential Privacy", 2021). The same holds when the mechanisms run concurrently
and interleave (Haney et al., "Concurrent Composition for Interactive Differential Privacy
with Adaptive Privacy-Loss Parameters", CCS 2023). Taking, after the fact, the best of many
orders (what the ledger did before) has no such proof: a filter over the whole privacy
profile is known to fail in general. (alpha, B)-RDP then converts to (epsilon, delta)-DP by
Balle et al. 2020 (``accounting.rdp_to_epsilon`` at the one order).

How the order is chosen. Publicly, once, at registration, from the budget (epsilon, delta)
alone: the order that admits the most Gaussian-like spend (RDP growing linearly in alpha,
which DP-SGD's subsampled Gaussian does over the orders that matter), i.e. the grid order
maximising (epsilon - conversion(alpha, delta)) / alpha. It never changes afterwards, also
not when the budget does.

One more admission rule, sound on its own: the *first* charged release of a dataset may take
the whole budget by its own tight (epsilon, delta) (PLD/PRV), even when its RDP at the
filter's order does not fit. That decision depends only on the first mechanism, chosen before
anything about the data was released, so it is not adaptive; and if its RDP exceeds the
filter's bound, the Rényi filter refuses every later release, so the dataset's whole output is
that one mechanism. Either branch is (epsilon, delta)-DP.
"""

import math
from dataclasses import dataclass

import numpy as np

from app.privacy.accounting import (
    ORDERS,
    RDP_ORDERS,
    History,
    Mechanism,
    rdp_at_order,
)
from app.privacy.noise_bisection import smallest_allowed_noise

_GRID = frozenset(RDP_ORDERS)

CITATION = (
    "Rényi filter at one fixed order (Feldman and Zrnic, NeurIPS 2021; concurrent "
    "composition: Haney et al., CCS 2023); RDP to (epsilon, delta) by Balle et al. 2020"
)


def conversion(order: float, delta: float) -> float:
    """What (order, rho)-RDP adds to rho to give epsilon at ``delta`` (Balle et al. 2020)."""
    return math.log((order - 1) / order) - (math.log(delta) + math.log(order)) / (order - 1)


def filter_order(epsilon: float, delta: float) -> float:
    """The dataset's fixed order: the grid order admitting the most linear-in-order RDP."""
    room = np.array([(epsilon - conversion(float(a), delta)) / a for a in ORDERS])
    return float(ORDERS[int(np.argmax(room))])


def rdp_at(history: History, order: float) -> float:
    """RDP of ``history`` (dp-accounting events, or DP-SGD mechanisms) at ``order`` (a grid
    order); inf when any part is non-private.

    Computed at the one order only (``accounting.rdp_at_order``): the filter never needs the
    others.
    """
    if order not in _GRID:
        raise ValueError(f"order {order} is not on the fixed grid of Rényi orders")
    return rdp_at_order(history, order)


@dataclass(frozen=True)
class RenyiFilter:
    """A dataset's filter: admits while the RDP at ``order`` stays within the budget's bound."""

    epsilon: float
    delta: float
    order: float

    @property
    def rdp_bound(self) -> float:
        """B: the RDP at ``order`` that converts to exactly ``epsilon`` at ``delta``."""
        return self.epsilon - conversion(self.order, self.delta)

    def epsilon_of(self, rdp: float) -> float:
        """The (epsilon, delta) guarantee of a composition with this RDP at the order."""
        if not math.isfinite(rdp):
            return math.inf
        if rdp <= 0.0:
            return 0.0
        return max(rdp + conversion(self.order, self.delta), 0.0)

    def admits(self, spent_rdp: float, new_rdp: float) -> bool:
        return spent_rdp + new_rdp <= self.rdp_bound

    def largest_fitting_noise(
        self, spent_rdp: float, sample_rate: float, steps: int
    ) -> float | None:
        """The smallest noise multiplier (to 1e-4, rounded up) at which ``steps`` steps at
        ``sample_rate`` fit next to ``spent_rdp``; None when even the largest allowed noise
        does not fit."""
        return smallest_allowed_noise(lambda sigma: self.admits(
            spent_rdp, rdp_at([Mechanism(sigma, sample_rate, steps)], self.order)))
