"""Storing every entry as a dp-accounting event changed no figure: on a grid of jobs (private
and not, charged in full and in part) and statistics releases (Gaussian and Laplace), every RDP,
PLD and filtered epsilon the ledger computes from an entry's stored event is the float it
computes, on the same machine, from the entry's columns (an entry written before events were
stored), and both are the figures the ledger gave before events (recorded in
``figures_before_events.json`` on another machine).

The recorded figures are matched to a relative 1e-7, not to the bit: the PRV accountant's FFT
and libm's exp and log round differently on other CPUs' instruction sets (an AMD EPYC with AVX2
and no AVX-512, 2026-11-27: 151 of the figures differed from the record, the RDP curves by at
most 4e-16 relative, the PRV epsilons by at most 4.3e-8)."""

import json
import math
from collections.abc import Iterator
from typing import Any

from app.ledger.models import LedgerEntry
from app.privacy import events
from tests.ledger import figures_grid

RECORDED_TOLERANCE = 1e-7


def _with_events() -> list[LedgerEntry]:
    out = []
    for row in figures_grid.columns():
        event = events.from_columns(
            mechanism=row["mechanism"], noise_multiplier=row["noise_multiplier"],
            sample_rate=row["sample_rate"], steps=row["steps"],
            components=row.get("components"), release="statistics_release_id" in row)
        out.append(LedgerEntry(**row, event=events.to_json(event)))
    return out


def _leaves(figures: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every figure (a repr string) with its path in the nested record."""
    if isinstance(figures, dict):
        for key, value in figures.items():
            yield from _leaves(value, f"{path}/{key}")
    elif isinstance(figures, list):
        for index, value in enumerate(figures):
            yield from _leaves(value, f"{path}/{index}")
    else:
        yield path, figures


def test_every_figure_is_the_same_from_the_event_as_from_the_columns_and_as_before() -> None:
    from_events = figures_grid.figures(_with_events())
    from_columns = figures_grid.figures(figures_grid.entries())
    assert from_events == from_columns  # to the last bit, on this machine
    recorded = dict(_leaves(json.loads(figures_grid.GOLDEN.read_text())))
    now = dict(_leaves(from_events))
    assert now.keys() == recorded.keys()
    for path, figure in recorded.items():
        assert math.isclose(float(now[path]), float(figure), rel_tol=RECORDED_TOLERANCE,
                            abs_tol=0.0), (path, now[path], figure)
