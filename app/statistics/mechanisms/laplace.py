"""The Laplace mechanism: pure epsilon-DP by OpenDP's map, charged as a ``LaplaceDpEvent``.

Epsilon adds, so a vector with share s of the target epsilon gets epsilon_v = s epsilon and
scale b = sensitivity / epsilon_v (shrunk by one part in 10^9 so that OpenDP's rounded-up map
stays within the share). OpenDP's epsilon gives the ledger's multiplier 1 / epsilon; the
release's epsilon is the sum of its vectors', at any delta.
"""

import math
from collections.abc import Sequence
from typing import Any

from app.privacy import mechanisms
from app.statistics.mechanisms.base import Mechanism, opendp

LAPLACE95 = math.log(20.0)  # P(|Laplace(b)| > b ln 20) = 0.05


class Laplace(Mechanism):
    name = charged_as = mechanisms.LAPLACE
    order = 20
    norm, unit, constructor = "l1", "epsilon", "make_laplace"
    words = "Laplace noise (pure epsilon-DP)"
    takes_delta = False

    def calibration(self, epsilon: float, delta: float) -> float:
        return epsilon

    def scale(self, sensitivity: float, share: float, calibration: float) -> float:
        return sensitivity / (calibration * share * (1.0 - 1e-9))

    def measurement(self, scale: float) -> Any:
        dp = opendp()
        return dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                 dp.l1_distance(T=float), scale=scale)

    def multiplier(self, privacy: float) -> float:
        return 1.0 / privacy

    def epsilon(self, privacies: Sequence[float], delta: float) -> float:
        return math.fsum(privacies)

    def standard_error(self, scale: float) -> float:
        return math.sqrt(2) * scale

    def half_width95(self, scale: float) -> float:
        return LAPLACE95 * scale


LAPLACE = Laplace()
