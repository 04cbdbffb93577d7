"""Noise for a release on the held-out rows that costs nothing beyond the training it follows.

The held-out rows (the calibration and the evaluation parts) are per-record random parts of
the dataset, disjoint from the training rows and from each other (``app.datasets.identity``: a
keyed PRF of each record's id). Given the coins, adding or removing one patient changes the
input of exactly one of the job's mechanisms; averaging over that patient's coin keeps the
worst of them (hockey-stick divergence is jointly convex, Renyi divergence jointly
quasi-convex). So a job whose held-out releases are each, at every RDP order of the ledger's
grid (the filter's order among them) and at the job's delta, no worse than its training is
charged exactly its training's spend: parallel composition.
"""

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from app.privacy.accounting import ORDERS, Mechanism, gaussian_epsilon, rdp_curve


def dominated_gaussian_noise(
    history: Sequence[Mechanism], delta: float, training_epsilon: float
) -> float:
    """The smallest noise multiplier (to 1e-4, rounded up) of one Gaussian release whose RDP
    is at most the training's at every grid order and whose exact epsilon at ``delta`` is at
    most ``training_epsilon``.

    Args:
        history: the training job's mechanisms (sigma, q, steps).
        delta: the job's delta.
        training_epsilon: the training's accounted epsilon at ``delta`` (the job's figure).

    Returns:
        The noise multiplier (noise std over the release's L2 sensitivity); 0 when the training
        is non-private (nothing to protect, an exact release).
    """
    if not history or any(m.non_private for m in history) or not math.isfinite(training_epsilon):
        return 0.0
    # One Gaussian at noise multiplier s has RDP alpha / (2 s^2) at every order alpha.
    sigma_rdp = math.sqrt(float(np.max(ORDERS / (2.0 * rdp_curve(history)))))

    def eps(sigma: float) -> float:
        return gaussian_epsilon([Mechanism(sigma, 1.0, 1)], delta)

    low, high = 1e-3, max(sigma_rdp, 1e-3)
    while eps(high) > training_epsilon:
        high *= 2.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if eps(mid) > training_epsilon else (low, mid)
    return max(sigma_rdp, high) * (1.0 + 1e-4)


def held_out_noise(history: Sequence[Mechanism], deltas: Iterable[float],
                   epsilon_at: Callable[[float], float]) -> float:
    """The noise of a held-out release (calibration, evaluation) that the training dominates
    at every delta the ledger reads the training at.

    The job's own figure is at the job's delta; the filter's first-release rule reads the
    training's tight epsilon at the *budget's* delta. Domination at one delta says nothing
    about another, so the release is matched at each (the largest noise wins); RDP domination
    at every order (the filter's composition) holds whichever delta is used.

    Args:
        deltas: the job's delta and the budget's (when the dataset has one).
        epsilon_at: the training's accounted epsilon at a given delta.
    """
    return max(dominated_gaussian_noise(history, delta, epsilon_at(delta))
               for delta in sorted(set(deltas)))
