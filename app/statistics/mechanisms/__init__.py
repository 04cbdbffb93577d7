"""The noise-adding mechanisms of statistics releases, by the name a request gives.

Each is a ``base.Mechanism`` (its calibration, OpenDP measurement, privacy map onto the
ledger's dp-accounting event, and its noise's error) in a module of its own; this registry is
the one place that lists them. A new mechanism: one module, one line here, and its name in
``app.privacy.mechanisms.NoiseMechanism`` (what a request may ask for); it is charged as one
of the ledger's one-shot events (``charged_as``, a key of ``app.privacy.events.ONE_SHOT``).
"""

from app.privacy.mechanisms import NoiseMechanism
from app.statistics.mechanisms.base import Mechanism
from app.statistics.mechanisms.gaussian import GAUSSIAN
from app.statistics.mechanisms.laplace import LAPLACE

MECHANISMS: dict[NoiseMechanism, Mechanism] = {m.name: m for m in (GAUSSIAN, LAPLACE)}


def of(name: str) -> Mechanism:
    """The registered mechanism named ``name`` (a request's ``privacy.mechanism``)."""
    return MECHANISMS[NoiseMechanism(name)]
