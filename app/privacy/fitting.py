"""The largest target a refused statistics release could have had: the accountant run backwards.

A refused release (409) names the largest target epsilon, at the release's delta, that the
dataset's filter would admit now for the same queries, split the same way, by the same
mechanism. Keeping the split means scaling every noisy vector's noise by one factor; which
factor fits is a property of the mechanism, so each one-shot mechanism of
``app.privacy.mechanisms`` brings its own fit here (a closed form for the Gaussian, a search for
the Laplace), looked up by the event's shape (``events.describe``): the ledger asks, it never
branches. Two ways to fit, as the admission has (``app.privacy.filter``): the RDP at the
filter's order within the room left, or, for the first release of a dataset, its own
(epsilon, delta) within the budget.
"""

import math
from collections.abc import Callable, Sequence

import numpy as np
from dp_accounting.dp_event import DpEvent

from app.privacy import accounting, events, mechanisms

# (components, room, order, first-release budget or None, delta) -> fitting targets.
Fit = Callable[[Sequence[float], float, float, tuple[float, float] | None, float], list[float]]


def _gaussian(components: Sequence[float], room: float, order: float,
              first: tuple[float, float] | None, delta: float) -> list[float]:
    """One Gaussian of signal-to-noise mu has RDP order mu^2 / 2 at every order; the target is
    its exact epsilon at ``delta``."""
    mus = [math.sqrt(2.0 * room / order)] if room > 0 else []
    if first is not None:  # the first-release rule: its exact epsilon may take the budget
        mus.append(mechanisms.gaussian_mu(*first))
    return [accounting.gaussian_epsilon([accounting.Mechanism(1.0 / mu, 1.0, 1)], delta)
            for mu in mus]


def _laplace(components: Sequence[float], room: float, order: float,
             first: tuple[float, float] | None, delta: float) -> list[float]:
    """Scale every component's epsilon by one factor: the largest pure total that fits."""
    total = mechanisms.laplace_epsilon(components)
    fractions = [1.0 / c / total for c in components]
    at = np.array([order])

    def rdp(target: float) -> float:
        return float(sum(mechanisms.laplace_rdp(target * f, at)[0] for f in fractions))

    fits = [first[0]] if first is not None else []  # first release: pure eps <= budget
    if room > 0:
        low, high = 0.0, 2.0 * room  # Laplace RDP <= its pure epsilon, so ``room`` fits
        while rdp(high) <= room and high < 1e6:
            low, high = high, 2.0 * high
        for _ in range(100):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if rdp(mid) <= room else (low, mid)
        fits.append(low)
    return fits


FITS: dict[str, Fit] = {mechanisms.GAUSSIAN: _gaussian, mechanisms.LAPLACE: _laplace}


def largest_targets(event: DpEvent, *, room: float, order: float,
                    first_release: tuple[float, float] | None, delta: float) -> list[float]:
    """Target epsilons (at ``delta``; a pure mechanism's pure epsilon) of ``event`` rescaled,
    each of which the filter admits now; empty when none does, or for an event with no fit.

    Args:
        room: the RDP left at the filter's ``order`` (bound minus what is charged).
        first_release: the budget (epsilon, delta) when nothing is charged yet (the
            first-release rule applies), else None.
    """
    said = events.describe(event)
    fit = FITS.get(said.mechanism)
    if fit is None or said.components is None:
        return []
    return fit(said.components, room, order, first_release, delta)
