"""The Gaussian mechanism: rho-zCDP by OpenDP's map, charged as a ``GaussianDpEvent``.

The release's target (epsilon, delta) is met exactly by one Gaussian with signal-to-noise mu
(``mechanisms.gaussian_mu``); Gaussian vectors compose by adding mu^2, so a vector with share
s gets mu_v^2 = s mu^2 and standard deviation sensitivity / mu_v. OpenDP's rho gives the
ledger's multiplier 1 / sqrt(2 rho); rhos add, and the composition is mu-GDP with
mu = sqrt(2 sum rho), whose epsilon at delta is exact (Balle and Wang 2018).
"""

import math
from collections.abc import Sequence
from typing import Any

from app.privacy import accounting, mechanisms
from app.statistics.mechanisms.base import Mechanism, opendp

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


class Gaussian(Mechanism):
    name = charged_as = mechanisms.GAUSSIAN
    order = 10
    norm, unit, constructor = "l2", "rho", "make_gaussian"
    words = "Gaussian noise (zero-concentrated DP)"
    takes_delta = True

    def calibration(self, epsilon: float, delta: float) -> float:
        return mechanisms.gaussian_mu(epsilon, delta)

    def scale(self, sensitivity: float, share: float, calibration: float) -> float:
        return sensitivity / (calibration * math.sqrt(share))

    def measurement(self, scale: float) -> Any:
        dp = opendp()
        return dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                  dp.l2_distance(T=float), scale=scale)

    def multiplier(self, privacy: float) -> float:
        return 1.0 / math.sqrt(2.0 * privacy)

    def epsilon(self, privacies: Sequence[float], delta: float) -> float:
        composed = self.multiplier(math.fsum(privacies))
        return accounting.gaussian_epsilon([accounting.Mechanism(composed, 1.0, 1)], delta)

    def standard_error(self, scale: float) -> float:
        return scale

    def half_width95(self, scale: float) -> float:
        return Z95 * scale


GAUSSIAN = Gaussian()
