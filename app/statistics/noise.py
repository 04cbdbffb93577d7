"""The noise of a release: calibrated from the plan, drawn by OpenDP's exact samplers.

OpenDP's ``make_gaussian`` and ``make_laplace`` on float vectors sample exactly (on a fine
lattice, with rational arithmetic) and so resist the floating-point attacks on textbook samplers
(Mironov 2012); their privacy maps give each vector's zCDP rho (Gaussian) or pure epsilon
(Laplace) at its sensitivity, and those figures, not ours, are what the ledger charges: each
vector becomes a dp-accounting event with noise multiplier 1 / sqrt(2 rho) or 1 / epsilon
(``app.privacy.mechanisms``), and the release the composition of its vectors' events.

How the target is split. Gaussian: the release's target (epsilon, delta) is met exactly by one
Gaussian with signal-to-noise mu (``mechanisms.gaussian_mu``); Gaussian vectors compose by
adding mu^2, so vector v gets mu_v^2 = share_v mu^2 and standard deviation sensitivity / mu_v.
Laplace: epsilon adds, so vector v gets epsilon_v = share_v epsilon and scale sensitivity /
epsilon_v. Nothing here reads a record; ``draw`` is called on exact aggregates only once the
ledger has admitted the release.
"""

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from typing import Any

import numpy as np
from dp_accounting.dp_event import ComposedDpEvent, DpEvent

from app.privacy import events, mechanisms
from app.statistics.plan import QueryPlan, Vector
from app.statistics.schemas import NoiseMechanism

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
LAPLACE95 = math.log(20.0)  # P(|Laplace(b)| > b ln 20) = 0.05


@lru_cache(maxsize=1)
def library() -> str:
    return f"opendp {version('opendp')}"


def _dp() -> Any:
    """OpenDP with its contrib features enabled (the samplers and maps used here)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


@dataclass(frozen=True)
class Noise:
    """The calibrated noise of one vector, and what OpenDP's map says it costs."""

    vector: Vector
    distribution: str  # gaussian | laplace
    scale: float  # standard deviation (gaussian) or b (laplace)
    privacy: float  # rho (gaussian) or pure epsilon (laplace), by OpenDP's map
    measurement: Any  # the OpenDP measurement that draws it

    @property
    def multiplier(self) -> float:
        """The ledger component: noise over sensitivity, from OpenDP's privacy figure."""
        if self.distribution == mechanisms.GAUSSIAN:
            return 1.0 / math.sqrt(2.0 * self.privacy)
        return 1.0 / self.privacy

    @property
    def event(self) -> DpEvent:
        """The vector's release as a dp-accounting event, at its ledger multiplier."""
        return events.ONE_SHOT[self.distribution](self.multiplier)

    @property
    def standard_error(self) -> float:
        return self.scale if self.distribution == mechanisms.GAUSSIAN else math.sqrt(2) * self.scale

    @property
    def half_width95(self) -> float:
        """Half the width of the exact 95% interval of the noise."""
        return Z95 * self.scale if self.distribution == mechanisms.GAUSSIAN else (
            LAPLACE95 * self.scale)

    @property
    def sampler(self) -> str:
        name = "make_gaussian" if self.distribution == mechanisms.GAUSSIAN else "make_laplace"
        return f"{library()} {name} (exact sampler, float vector)"


def _gaussian(vector: Vector, mu: float) -> Noise:
    dp = _dp()
    scale = vector.sensitivity / (mu * math.sqrt(vector.share))
    measurement = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                     dp.l2_distance(T=float), scale=scale)
    return Noise(vector, mechanisms.GAUSSIAN, scale, float(measurement.map(vector.sensitivity)),
                 measurement)


def _laplace(vector: Vector, epsilon: float) -> Noise:
    dp = _dp()
    scale = vector.sensitivity / (epsilon * vector.share * (1.0 - 1e-9))
    measurement = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                                    dp.l1_distance(T=float), scale=scale)
    return Noise(vector, mechanisms.LAPLACE, scale, float(measurement.map(vector.sensitivity)),
                 measurement)


def calibrate(plans: list[QueryPlan], *, mechanism: NoiseMechanism, epsilon: float,
              delta: float) -> list[list[Noise]]:
    """Each query's vectors' noise for the release target (``delta`` unused by Laplace)."""
    if mechanism is NoiseMechanism.GAUSSIAN:
        mu = mechanisms.gaussian_mu(epsilon, delta)
        return [[_gaussian(v, mu) for v in p.vectors] for p in plans]
    return [[_laplace(v, epsilon) for v in p.vectors] for p in plans]


def event(noises: list[list[Noise]]) -> DpEvent:
    """The release as one dp-accounting event: its vectors' events composed, in query order
    (the ledger records their multipliers as its components)."""
    return ComposedDpEvent([n.event for query in noises for n in query])


def draw(noise: Noise, exact: np.ndarray) -> np.ndarray:
    """``exact`` plus one draw of the vector's noise (OpenDP's sampler)."""
    return np.asarray(noise.measurement(exact.astype(float).tolist()), dtype=float)
