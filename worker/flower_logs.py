"""Flower's log lines through the service's own handler, once, without its deprecation banners.

Flower's logger (``flwr``) has a console handler of its own and also propagates to the root
logger, so every line was printed twice (once in colour, once as the service's JSON). We keep
the service's handler, and drop the banners that ``start_server`` and ``start_client`` print
on every call (this service uses them knowingly: see ``worker.federated_coordinator``).
"""

import logging
import os

# Flower reads this when it is imported: this module is imported before flwr (its default, 1,
# posts to telemetry.flower.ai).
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


class _NoDeprecationBanner(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("DEPRECATED FEATURE")


def route_flower_logs() -> None:
    """Call after importing flwr (its handler is installed at import)."""
    flower = logging.getLogger("flwr")
    for handler in list(flower.handlers):
        flower.removeHandler(handler)
    if not any(isinstance(f, _NoDeprecationBanner) for f in flower.filters):
        flower.addFilter(_NoDeprecationBanner())
    flower.propagate = True
