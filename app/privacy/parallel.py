"""Noise for a release on the held-out rows that costs nothing beyond the training it follows.

The held-out rows (the calibration and the evaluation parts) are per-record random parts of
the dataset, disjoint from the training rows and from each other
(``app.datasets.patients.identity``: a keyed PRF of each record's id). Given the coins, adding or
removing one patient changes the input of exactly one of the job's mechanisms; averaging over that
patient's coin keeps the worst of them (hockey-stick divergence is jointly convex, Renyi divergence
jointly quasi-convex). So a job whose held-out releases are each, at every RDP order of the ledger's
grid (the filter's order among them) and at the job's delta, no worse than its training is
charged exactly its training's spend: parallel composition.
"""

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from app.privacy.accounting import (
    ORDERS,
    History,
    Mechanism,
    gaussian_epsilon,
    leaves_of,
    rdp_curve,
)


def _non_private(history: History) -> bool:
    """Any part spent without noise (a DP-SGD step at noise 0, a ``NonPrivateDpEvent``)."""
    return any(m.non_private if isinstance(m, Mechanism) else leaves_of([m]).non_private
               for m in history)


def dominated_gaussian_noise(
    history: History, delta: float, training_epsilon: float
) -> float:
    """The smallest noise multiplier (to 1e-4, rounded up) of one Gaussian release whose RDP
    is at most the training's at every grid order and whose exact epsilon at ``delta`` is at
    most ``training_epsilon``.

    Args:
        history: what the training spent: DP-SGD's mechanisms (sigma, q, steps) or any
            dp-accounting events (a fitted family's release).
        delta: the job's delta.
        training_epsilon: the training's accounted epsilon at ``delta`` (the job's figure).

    Returns:
        The noise multiplier (noise std over the release's L2 sensitivity); 0 when the training
        is non-private (nothing to protect, an exact release).
    """
    if not history or _non_private(history) or not math.isfinite(training_epsilon):
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


class CostlierThanTraining(RuntimeError):
    """A held-out release's noise would cost more than the training at some delta or order:
    parallel composition would not cover it, so it must not be released."""


def held_out_noise(history: History, deltas: Iterable[float],
                   epsilon_at: Callable[[float], float]) -> float:
    """The noise of a held-out release (calibration, evaluation) that the training dominates
    at every delta the ledger reads the training at, checked there (``check_dominated``).

    The job's own figure is at the job's delta; the filters' first-release rule reads the
    training's tight epsilon at the *budget's* delta and at the patient space's (the
    organisation's per-patient delta). Domination at one delta says nothing about another, so
    the release is matched at each (the largest noise wins); RDP domination at every order
    (the filters' composition) holds whichever delta is used.

    Args:
        deltas: the job's delta and those the ledger reads the dataset's releases at
            (``app.flows.job_run.LoadedData.held_out_deltas``).
        epsilon_at: the training's accounted epsilon at a given delta.

    Raises:
        CostlierThanTraining: the noise found does not pass ``check_dominated``.
    """
    training = {delta: epsilon_at(delta) for delta in sorted(set(deltas))}
    noise = max(dominated_gaussian_noise(history, delta, epsilon)
                for delta, epsilon in training.items())
    check_dominated(noise, history, training)
    return noise


def check_dominated(noise: float, history: History,
                    training: Mapping[float, float]) -> None:
    """Check one Gaussian release at noise multiplier ``noise`` against the training it
    follows: its RDP at most the training's at every grid order, and its exact epsilon at
    most the training's at each delta of ``training`` (delta -> the training's epsilon).

    Raises:
        CostlierThanTraining: it costs more somewhere (naming the order or the delta), or it
            is exact (``noise`` 0) after a training with a finite guarantee.
    """
    if not history or _non_private(history):
        return  # a non-private training: nothing for the release to protect
    if noise == 0.0 and not all(math.isfinite(e) for e in training.values()):
        return  # as ``dominated_gaussian_noise``: no finite guarantee to stay within
    if not (math.isfinite(noise) and noise > 0.0):
        raise CostlierThanTraining(f"an exact held-out release (noise {noise}) after DP "
                                   "training")
    excess = ORDERS / (2.0 * noise**2) - rdp_curve(history)
    if float(np.max(excess)) > 1e-12:
        order = float(ORDERS[int(np.argmax(excess))])
        raise CostlierThanTraining(f"noise {noise:.6g} costs more than the training at RDP "
                                   f"order {order:g}")
    for delta, epsilon in sorted(training.items()):
        release = gaussian_epsilon([Mechanism(noise, 1.0, 1)], delta)
        if release > epsilon:
            raise CostlierThanTraining(f"noise {noise:.6g} costs epsilon {release:.6g} at "
                                       f"delta {delta:g}, above the training's {epsilon:.6g}")
