"""The noise of a release: calibrated from the plan, drawn by OpenDP's exact samplers.

OpenDP's measurements on float vectors (``make_gaussian``, ``make_laplace``) sample exactly (on
a fine lattice, with rational arithmetic) and so resist the floating-point attacks on textbook
samplers (Mironov 2012); their privacy maps give each vector's privacy figure at its
sensitivity, and those figures, not ours, are what the ledger charges: each vector becomes the
dp-accounting event its mechanism names (``app.statistics.mechanisms``), and the release the
composition of its vectors' events. How a mechanism splits the target over the vectors, draws
and accounts is its own class's; this module applies it to a plan. Nothing here reads a
record; ``draw`` is called on exact aggregates only once the ledger has admitted the release.
"""

from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from typing import Any

import numpy as np
from dp_accounting.dp_event import ComposedDpEvent, DpEvent

from app.statistics import mechanisms
from app.statistics.mechanisms.base import Mechanism
from app.statistics.mechanisms.gaussian import Z95 as Z95
from app.statistics.shapes import QueryPlan, Vector


@lru_cache(maxsize=1)
def library() -> str:
    return f"opendp {version('opendp')}"


@dataclass(frozen=True)
class Noise:
    """The calibrated noise of one vector, and what OpenDP's map says it costs."""

    vector: Vector
    mechanism: Mechanism
    scale: float  # standard deviation (gaussian) or b (laplace)
    privacy: float  # OpenDP's figure: rho (gaussian) or pure epsilon (laplace)
    measurement: Any  # the OpenDP measurement that draws it

    @property
    def distribution(self) -> str:
        return str(self.mechanism.name)

    @property
    def multiplier(self) -> float:
        """The ledger component: noise over sensitivity, from OpenDP's privacy figure."""
        return self.mechanism.multiplier(self.privacy)

    @property
    def event(self) -> DpEvent:
        """The vector's release as a dp-accounting event, at its ledger multiplier."""
        return self.mechanism.event(self.multiplier)

    @property
    def standard_error(self) -> float:
        return self.mechanism.standard_error(self.scale)

    @property
    def half_width95(self) -> float:
        """Half the width of the exact 95% interval of the noise."""
        return self.mechanism.half_width95(self.scale)

    @property
    def sampler(self) -> str:
        return f"{library()} {self.mechanism.constructor} (exact sampler, float vector)"


def calibrated(mechanism: Mechanism, vector: Vector, calibration: float) -> Noise:
    """``vector``'s noise under ``mechanism`` at the release's ``calibration``."""
    scale = mechanism.scale(vector.sensitivity, vector.share, calibration)
    measurement = mechanism.measurement(scale)
    return Noise(vector, mechanism, scale, mechanism.privacy(measurement, vector.sensitivity),
                 measurement)


def calibrate(plans: list[QueryPlan], *, mechanism: str, epsilon: float,
              delta: float) -> list[list[Noise]]:
    """Each query's vectors' noise for the release target (``delta`` unused by pure ones)."""
    chosen = mechanisms.of(mechanism)
    calibration = chosen.calibration(epsilon, delta)
    return [[calibrated(chosen, v, calibration) for v in p.vectors] for p in plans]


def event(noises: list[list[Noise]]) -> DpEvent:
    """The release as one dp-accounting event: its vectors' events composed, in query order
    (the ledger records their multipliers as its components)."""
    return ComposedDpEvent([n.event for query in noises for n in query])


def draw(noise: Noise, exact: np.ndarray) -> np.ndarray:
    """``exact`` plus one draw of the vector's noise (OpenDP's sampler)."""
    return np.asarray(noise.measurement(exact.astype(float).tolist()), dtype=float)
