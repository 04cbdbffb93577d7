"""The noise-adding mechanisms of statistics releases, by the name a request gives.

Each is a ``base.Mechanism`` (its calibration, OpenDP measurement, privacy map onto the
ledger's dp-accounting event, and its noise's error) in a module of its own, with one instance
of it; the package finds every module here (``app.core.plugins.members``), in each class's
``order``, so a new mechanism is its module alone: the registry lists it and a request may name
it. It is charged as one of the ledger's one-shot events (``charged_as``, a key of
``app.privacy.events.ONE_SHOT``).
"""

import sys

from app.core import plugins
from app.statistics.mechanisms.base import Mechanism
from app.statistics.schemas import NOISE_MECHANISMS

MECHANISMS: dict[str, Mechanism] = {
    m.name: m for m in plugins.members(sys.modules[__name__], Mechanism)}  # type: ignore[type-abstract]


def names() -> tuple[str, ...]:
    """The names a request may give, in the order the API lists them."""
    return tuple(MECHANISMS)


NOISE_MECHANISMS.provide(names)


def of(name: str) -> Mechanism:
    """The registered mechanism named ``name`` (a request's ``privacy.mechanism``)."""
    return MECHANISMS[name]
