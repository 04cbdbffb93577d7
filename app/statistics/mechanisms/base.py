"""What a noise-adding mechanism of a statistics release is: one object from plan to answer.

A ``Mechanism`` carries, for a noisy vector of known sensitivity and privacy share:

* its calibration: the noise scale that meets the release's target (``calibration`` once per
  release, then ``scale`` per vector), from public facts alone;
* its OpenDP measurement (``measurement``), which draws the noise, and OpenDP's privacy map
  of it (``privacy``: rho for zCDP, epsilon for pure DP, at the vector's sensitivity);
* its privacy map onto the ledger: the noise multiplier OpenDP's figure implies
  (``multiplier``), the dp-accounting event the ledger charges (``event``) and the epsilon
  the vectors compose to (``epsilon``), which a test checks against dp-accounting itself;
* its noise's error for the estimators (``standard_error``, ``half_width95``).

A new mechanism is one module in ``app.statistics.mechanisms`` with one subclass and one
instance of it: the package finds it, and a request may name it
(``app.statistics.schemas.NoiseMechanism``).
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from dp_accounting.dp_event import DpEvent

from app.privacy import events


def opendp() -> Any:
    """OpenDP with its contrib features enabled (the samplers and maps used here)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


class Mechanism(ABC):
    """A one-shot additive-noise mechanism on float vectors (see the module docstring)."""

    name: ClassVar[str]  # the word a request names it by, stored on the release
    order: ClassVar[int] = 0  # where the API lists it (OpenAPI's enum, errors); ties by name
    norm: ClassVar[str]  # the sensitivity's norm: l2 | l1
    unit: ClassVar[str]  # what OpenDP's privacy map gives: rho | epsilon
    constructor: ClassVar[str]  # the OpenDP measurement constructor, for the answer's words
    words: ClassVar[str]  # the noise in words, for the release's statement
    takes_delta: ClassVar[bool]  # False: pure epsilon-DP, a request's delta is refused
    charged_as: ClassVar[str]  # the ledger's one-shot event (a key of events.ONE_SHOT)

    @abstractmethod
    def calibration(self, epsilon: float, delta: float) -> float:
        """The release's one calibration figure for target (``epsilon``, ``delta``)."""

    @abstractmethod
    def scale(self, sensitivity: float, share: float, calibration: float) -> float:
        """The noise scale of a vector with ``sensitivity`` and a ``share`` of the target."""

    @abstractmethod
    def measurement(self, scale: float) -> Any:
        """The OpenDP measurement that adds this noise at ``scale`` to a float vector."""

    def privacy(self, measurement: Any, sensitivity: float) -> float:
        """OpenDP's privacy map of ``measurement`` at ``sensitivity`` (rho or epsilon)."""
        return float(measurement.map(sensitivity))

    @abstractmethod
    def multiplier(self, privacy: float) -> float:
        """The ledger's noise multiplier (scale over sensitivity) implied by ``privacy``."""

    def event(self, multiplier: float) -> DpEvent:
        """One noisy vector as the dp-accounting event the ledger charges."""
        return events.ONE_SHOT[self.charged_as](multiplier)

    @abstractmethod
    def epsilon(self, privacies: Sequence[float], delta: float) -> float:
        """The epsilon at ``delta`` that vectors with OpenDP figures ``privacies`` compose to."""

    @abstractmethod
    def standard_error(self, scale: float) -> float:
        """The noise's standard deviation."""

    @abstractmethod
    def half_width95(self, scale: float) -> float:
        """Half the width of the noise's exact 95% interval."""
