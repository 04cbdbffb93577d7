"""RDP of the events the project has no kernel for, by dp-accounting's ``RdpAccountant``.

A repeat-and-select search (``RepeatAndSelectDpEvent``) is one: its RDP at one order depends on
the run's whole curve (Papernot and Steinke's bound minimises over an auxiliary order and, for
a Poisson number of runs, converts the run's curve to a delta). So each such event is composed
on the whole fixed grid, once (ledger entries are immutable), and read at the orders asked:
the Rényi filter's one order gets dp-accounting's own figure there, exactly what an
independent ``RdpAccountant().compose(event)`` gives, never a looser one-order figure.
"""

import json
import logging
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
from dp_accounting.dp_event import DpEvent
from dp_accounting.rdp import RdpAccountant

from app.privacy import events


def curve(event: DpEvent, orders: Iterable[float], grid: tuple[float, ...]
          ) -> np.ndarray | None:
    """The event's RDP at ``orders``; None where dp-accounting has no analysis of it.

    Args:
        orders: where to read it; orders of ``grid`` are read off the grid's curve.
        grid: the fixed grid of Rényi orders the event is composed on.
    """
    wanted = [float(a) for a in orders]
    index = {float(a): i for i, a in enumerate(grid)}
    if all(a in index for a in wanted):
        whole = _grid_curve(events.canonical(event), grid)
        return None if whole is None else whole[[index[a] for a in wanted]]
    return _rdp_on(event, wanted)


def _rdp_on(event: DpEvent, orders: Sequence[float]) -> np.ndarray | None:
    theirs = RdpAccountant(orders=list(orders))
    if not theirs.supports(event):
        return None
    absl = logging.getLogger("absl")
    absl.addFilter(_unconverged)
    try:
        theirs.compose(event)
    finally:
        absl.removeFilter(_unconverged)
    return np.asarray(theirs.rdp, dtype=float)


def _unconverged(record: logging.LogRecord) -> bool:
    """Drop dp-accounting's warning that a fractional order's series did not converge: it then
    charges that order infinite RDP (an upper bound; the other orders carry the figure), which
    is expected near order 1 at large sample rates, not news for the service's log."""
    return "failed to converge" not in record.getMessage()


@lru_cache(maxsize=1024)
def _grid_curve(serialised: str, grid: tuple[float, ...]) -> np.ndarray | None:
    found = _rdp_on(events.from_json(json.loads(serialised)), grid)
    if found is not None:
        found.setflags(write=False)
    return found


def clear_cache() -> None:
    _grid_curve.cache_clear()
