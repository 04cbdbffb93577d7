"""Replay a dataset's chain and check that what it held never exceeded the budget in force.

A chain can link perfectly and still record an overspend: a writer that admitted against a
stale budget, or a budget lowered below what was already held, leaves every hash intact. So
``chain.verify`` also replays the records in order and, after every record, checks the
dataset's filter (``app.privacy.filter``) against what the entries held *at that point*:

* a reserve holds its entry's whole plan; a commit changes nothing (the rest stays reserved);
  a release leaves only the committed steps (none for a release before any step);
* a budget record sets the budget (and, for datasets registered before the filter's order was
  stored, the order the admission would have used);
* the held entries are within budget when their RDP at the filter's order stays within its
  bound, or when there is exactly one and its own tight epsilon fits (the first-release rule).

A record is invalid when the held spend is then over the budget: exactly the admission rule,
applied after the fact, so a chain the service wrote under its lock always passes.
"""

import math
from dataclasses import dataclass, field

from app.ledger import spend as ledger_spend
from app.ledger.models import BUDGET, COMMIT, RELEASE, RESERVE, LedgerEntry, LedgerEvent
from app.privacy.filter import RenyiFilter, filter_order

# Float slack only: the admission compares the same sums, so a legal chain sits at or below.
_RELATIVE_SLACK = 1e-9


@dataclass
class _Held:
    """One entry's state in the replay: the steps it holds against the budget."""

    steps: int
    committed: int = 0


@dataclass
class BudgetReplay:
    """The budget in force and what each entry holds, record by record."""

    budget: tuple[float | None, float | None]
    stored_order: float | None
    held: dict[int, _Held] = field(default_factory=dict)

    def apply(self, record: LedgerEvent, entry: LedgerEntry | None) -> None:
        if record.kind == BUDGET:
            self.budget = (record.budget_epsilon, record.budget_delta)
        elif record.kind == RESERVE and entry is not None:
            self.held[entry.id] = _Held(steps=entry.steps)
        elif record.kind == COMMIT and entry is not None and entry.id in self.held:
            held = self.held[entry.id]
            held.committed = entry.steps if record.steps is None else record.steps
        elif record.kind == RELEASE and entry is not None and entry.id in self.held:
            held = self.held[entry.id]
            held.steps = held.committed

    def guard(self) -> RenyiFilter | None:
        epsilon, delta = self.budget
        if epsilon is None or delta is None:
            return None
        return RenyiFilter(epsilon, delta, self.stored_order or filter_order(epsilon, delta))

    def overspend(self, entries: dict[int, LedgerEntry]) -> str | None:
        """Why the held entries exceed the budget in force, or None when they fit."""
        guard = self.guard()
        if guard is None:
            return None
        held = [(entries[i], h.steps) for i, h in self.held.items() if h.steps > 0]
        if not held:
            return None
        rdp = math.fsum(ledger_spend.entry_rdp_at(e, guard.order, steps) for e, steps in held)
        if rdp <= guard.rdp_bound + _RELATIVE_SLACK * max(1.0, abs(guard.rdp_bound)):
            return None
        if len(held) == 1:
            alone = ledger_spend.single_release_epsilon(held[0][0], guard.delta, held[0][1])
            if alone <= guard.epsilon * (1 + _RELATIVE_SLACK):
                return None
        spent = guard.epsilon_of(rdp)
        return (f"the {len(held)} entries held here spend epsilon {spent:.6g} at delta "
                f"{guard.delta:g} (RDP {rdp:.6g} at order {guard.order:g}), over the budget "
                f"epsilon {guard.epsilon:g} in force: admitted past the filter")


def first_overspend(
    records: list[LedgerEvent],
    entries: dict[int, LedgerEntry],
    *,
    budget: tuple[float | None, float | None],
    stored_order: float | None,
) -> tuple[LedgerEvent, str] | None:
    """The first record after which the held spend exceeds the budget in force, with why.

    Args:
        records: the dataset's chain, already checked to link, in order.
        budget: the dataset's current budget; it applies from the start only to chains with no
            budget record (registered before budgets were chained).
        stored_order: the filter order fixed at registration (None for older datasets).

    Raises:
        LedgerIntegrityError: an entry cannot be composed as recorded.
    """
    anchored = any(r.kind == BUDGET for r in records)
    replay = BudgetReplay(budget=(None, None) if anchored else budget, stored_order=stored_order)
    for record in records:
        entry = entries.get(record.entry_id) if record.entry_id is not None else None
        replay.apply(record, entry)
        if record.kind in (RESERVE, BUDGET):  # the only records that can raise the spend
            reason = replay.overspend(entries)
            if reason is not None:
                return record, reason
    return None
