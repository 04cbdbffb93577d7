"""Storing every entry as a dp-accounting event changed no figure: on a grid of jobs (private
and not, charged in full and in part) and statistics releases (Gaussian and Laplace), every RDP,
PLD and filtered epsilon the ledger computes is the float it was before (recorded in
``figures_before_events.json``), whether the entry's event is read from its stored JSON or, for
an entry written before events were stored, from its columns."""

import json

import pytest

from app.ledger.models import LedgerEntry
from app.privacy import events
from tests.ledger import figures_grid


def _with_events() -> list[LedgerEntry]:
    out = []
    for row in figures_grid.columns():
        event = events.from_columns(
            mechanism=row["mechanism"], noise_multiplier=row["noise_multiplier"],
            sample_rate=row["sample_rate"], steps=row["steps"],
            components=row.get("components"), release="statistics_release_id" in row)
        out.append(LedgerEntry(**row, event=events.to_json(event)))
    return out


@pytest.mark.parametrize("source", ["stored_event", "columns"])
def test_every_figure_is_the_same_float_as_before(source: str) -> None:
    before = json.loads(figures_grid.GOLDEN.read_text())
    entries = _with_events() if source == "stored_event" else figures_grid.entries()
    after = figures_grid.figures(entries)
    assert after.keys() == before.keys()
    for key, figures in before.items():
        assert after[key] == figures, key
