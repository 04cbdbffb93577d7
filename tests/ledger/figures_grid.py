"""A grid of ledger entries and every figure the ledger computes of them.

``figures()`` was run once on the ledger as it was before entries were stored as dp-accounting
events (``python -m tests.ledger.figures_grid`` wrote ``figures_before_events.json``);
``test_event_figures`` runs it on today's ledger and requires every figure to be the same
float, to the last bit.
"""

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy import accounting
from app.privacy.filter import filter_order

GOLDEN = Path(__file__).with_name("figures_before_events.json")
ORDERS = (1.5, 3.9, 11.0, 32.0, 128.0)
DELTAS = (1e-5, 1e-7)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Guarded:
    id: int = 1
    budget_epsilon: float | None = 8.0
    budget_delta: float | None = 1e-5
    filter_order: float | None = filter_order(8.0, 1e-5)


def _job(entry_id: int, sigma: float, q: float, steps: int) -> dict[str, Any]:
    return {"id": entry_id, "dataset_id": 1, "job_id": entry_id,
            "mechanism": "poisson_subsampled_gaussian" if sigma > 0 else "non_private",
            "noise_multiplier": sigma, "sample_rate": q, "steps": steps, "clip_norm": 1.0,
            "delta": 1e-5, "accountant": "rdp", "created_at": T0}


def _release(entry_id: int, kind: str, components: list[float]) -> dict[str, Any]:
    total = (sum(1 / c**2 for c in components) ** -0.5 if kind == "gaussian"
             else 1 / sum(1 / c for c in components))
    return {"id": entry_id, "dataset_id": 1, "statistics_release_id": entry_id,
            "mechanism": kind, "noise_multiplier": total, "sample_rate": 1.0, "steps": 1,
            "clip_norm": 1.0, "delta": 1e-5, "accountant": "rdp", "components": components,
            "created_at": T0}


def columns() -> list[dict[str, Any]]:
    """The grid: DP-SGD jobs, one non-private job, Gaussian and Laplace releases."""
    rows = []
    for sigma in (0.7, 2.0, 7.3):
        for q in (0.004, 0.3, 1.0):
            for steps in (1, 1000):
                rows.append(_job(len(rows) + 1, sigma, q, steps))
    rows.append(_job(len(rows) + 1, 0.0, 0.01, 50))
    for kind in ("gaussian", "laplace"):
        for components in ([0.8], [2.0, 3.0], [1.3, 0.7, 5.0], [40.0, 25.0]):
            rows.append(_release(len(rows) + 1, kind, components))
    return rows


def _f(value: float) -> str:
    return repr(float(value))


def figures(entries: list[LedgerEntry]) -> dict[str, Any]:
    """Every figure of every entry, and of a few compositions, as repr strings."""
    out: dict[str, Any] = {}
    guarded, public = Guarded(), Guarded(budget_epsilon=None, budget_delta=None,
                                         filter_order=None)
    for entry in entries:
        key = str(entry.id)
        steps = [entry.steps] + ([entry.steps // 3] if entry.steps > 2 else [])
        out[key] = {
            "rdp_at": [_f(ledger_spend.entry_rdp_at(entry, o, s)) for o in ORDERS for s in steps],
            "curve": [_f(v) for v in ledger_spend.entry_rdp_curve(entry)],
            "alone": [_f(ledger_spend.single_release_epsilon(entry, d, s))
                      for d in DELTAS for s in steps],
            "guarded": _f(ledger_spend.composed_epsilon(guarded, [entry])),
        }
    private = [e for e in entries if e.noise_multiplier > 0]
    groups = [private[i:i + 3] for i in range(0, len(private), 3)] + [private[::4]]
    for n, group in enumerate(groups):
        spend = ledger_spend.spend_of(guarded, group)
        out[f"group{n}"] = {
            "guarded": _f(ledger_spend.composed_epsilon(guarded, group)),
            "public": _f(ledger_spend.composed_epsilon(public, group)),
            "spent_rdp": _f(ledger_spend.spent_rdp(group, guarded.filter_order or 0.0)),
            "spend": [_f(spend.composed_epsilon), _f(spend.naive_epsilon)],
            "timeline": [[_f(p.entry_epsilon), _f(p.composed_epsilon), _f(p.naive_epsilon)]
                         for p in ledger_spend.timeline_of(guarded, group)],
        }
    for delta in DELTAS:  # what a job's entry records: every accountant's figure
        for entry in entries[:18]:
            m = accounting.Mechanism(entry.noise_multiplier, entry.sample_rate, entry.steps)
            by = accounting.epsilon_by_accountant([m], delta)
            out[f"job{entry.id}@{delta}"] = {k: _f(v) for k, v in sorted(by.items())}
    return out


def entries() -> list[LedgerEntry]:
    return [LedgerEntry(**row) for row in columns()]


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(figures(entries()), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
