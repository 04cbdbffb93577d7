"""What the per-patient filter says each block of a patient space has spent, and changing the
space's budget.

A block's patients are charged by every release on each of its datasets that did not leave them
out (``app.ledger.spaces``, ``app.ledger.left_out``), so its spend is the space's filter
(``RenyiFilter`` at the space's fixed order) over those charged entries, with the filter's
first-release rule: exactly what admission checks (``app.ledger.admission``). A block that
cannot afford a release is left out of it; the organisation's budget cannot go below what its
most-spent live block has spent or reserved. Spends are exact functions of the ledger and of
which blocks exist; block sizes are not needed here and are never read.
"""

import math
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.time import as_utc
from app.ledger import left_out, space_chain, spaces
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetBelowSpend
from app.ledger.models import LedgerEntry
from app.ledger.spaces import PatientBlock, PatientSpace
from app.privacy import accounting
from app.privacy.filter import RenyiFilter


@dataclass(frozen=True)
class BlockPoint:
    """A block's spend right after one more charged entry on one of its datasets."""

    entry_id: int
    dataset_id: int
    at: datetime
    epsilon: float


@dataclass(frozen=True)
class BlockSpend:
    """One block, the charged entries of its datasets (oldest first) with each one's RDP at
    the space's order, and their spend by the space's filter."""

    block: PatientBlock
    entries: list[LedgerEntry]
    epsilon: float
    rdp: tuple[float, ...] = ()


def spends(*, session: Session, guard: RenyiFilter,
           blocks: list[PatientBlock]) -> list[BlockSpend]:
    """Each block's spend by ``guard``: ``spend.filtered_epsilon`` of its entries, with each
    entry's RDP computed once however many blocks it charges (a space has thousands of
    blocks), as admission does; one query for the entries of all their datasets."""
    by_dataset = ledger_spend.charged_by_dataset(
        session=session, dataset_ids={d for b in blocks for d in b.datasets})
    rdp = {e.id: ledger_spend.spent_rdp([e], guard.order)
           for found in by_dataset.values() for e in found}
    out = []
    for block in blocks:
        entries = sorted((e for d in block.datasets for e in by_dataset.get(d, [])
                          if left_out.reads(e, block.datasets)), key=lambda e: e.id)
        charges = tuple(rdp[e.id] for e in entries)
        spent = ledger_spend.tailed(guard, entries).epsilon_of(math.fsum(charges))
        if len(entries) == 1:  # the filter's first-release rule, as filtered_epsilon
            spent = min(spent, ledger_spend.single_release_epsilon(entries[0], guard.delta))
        out.append(BlockSpend(block, entries, spent if entries else 0.0, charges))
    return out


def most_spent(found: list[BlockSpend]) -> BlockSpend | None:
    """The block with the least room left (the first of equals); None without blocks."""
    return max(found, key=lambda s: s.epsilon, default=None)


def blocks_ever(*, session: Session, space_id: int, dataset_id: int) -> list[PatientBlock]:
    """Every block, live or closed, whose patients are in ``dataset_id``, oldest first."""
    rows = session.scalars(select(PatientBlock).where(PatientBlock.space_id == space_id,
                                                      PatientBlock.size > 0)
                           .order_by(PatientBlock.id))
    return [b for b in rows if dataset_id in b.datasets]


def timeline(spent: BlockSpend, guard: RenyiFilter) -> list[BlockPoint]:
    """The block's spend after each charged entry on its datasets, in ledger order (a closed
    block's up to when it closed: its patients' later releases are its parts')."""
    closed = as_utc(spent.block.closed_at)
    points, charges, so_far = [], [], []
    for entry, charge in zip(spent.entries, spent.rdp, strict=True):
        if closed is not None and (as_utc(entry.created_at) or closed) > closed:
            continue
        charges.append(charge)
        so_far.append(entry)
        epsilon = (ledger_spend.filtered_epsilon(guard, [entry]) if len(charges) == 1
                   else ledger_spend.tailed(guard, so_far).epsilon_of(math.fsum(charges)))
        points.append(BlockPoint(entry.id, entry.dataset_id, entry.created_at, epsilon))
    return points


def change_budget(*, session: Session, space_id: int, epsilon: float,
                  delta: float) -> PatientSpace:
    """Set and chain the space's per-patient budget unless its most-spent live block has
    already spent or reserved more than it at the new delta (as a dataset's ``change_budget``);
    the filter's order stays the one fixed when the space was created.

    Raises:
        BudgetBelowSpend: the most-spent live block's composed spend exceeds the new epsilon.
    """
    space = spaces.lock_space(session=session, space_id=space_id)
    guard = RenyiFilter(epsilon, delta, space.filter_order)
    blocks = spaces.live_blocks(session=session, space_id=space.id)
    worst = most_spent(spends(session=session, guard=guard, blocks=blocks))
    spent = 0.0 if worst is None else worst.epsilon
    if spent > epsilon:
        raise BudgetBelowSpend(
            f"the organisation's most-spent patients have already spent or reserved epsilon "
            f"{spent:.4g} at delta {delta:g}; the per-patient budget cannot go below that",
            field="epsilon",
            allowed=f"[{spent:.6g}, 100]" if math.isfinite(spent) else None,
            spent_epsilon=accounting.finite_or_none(spent),
            requested={"epsilon": epsilon, "delta": delta},
        )
    space.budget_epsilon, space.budget_delta = epsilon, delta
    session.flush()
    space_chain.append_budget(session=session, space=space)
    return space
