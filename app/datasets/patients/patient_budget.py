"""The organisation's per-patient budget: what it is, what its most-spent patients have used,
and changing it.

The budget lives on the organisation's patient space (``app.ledger.spaces``); the ledger
refuses a budget below what is spent (``app.ledger.block_spend.change_budget``). The rule that
needs the datasets is here: delta at most 1/(10 n) for the largest private upload n the space
holds, the rule every upload into it is checked against (``app.datasets.uploads.accept``).
"""

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.audit import TABLE_HOLDERS
from app.datasets.models import Dataset
from app.datasets.rules import check_delta
from app.ledger import block_spend, space_chain, spaces
from app.ledger.schemas import PatientBudgetChange, PatientBudgetOut, SpaceChainVerification
from app.ledger.spaces import PatientSpace
from app.privacy.accounting import finite_or_none
from app.privacy.terms import PATIENT_SPEND_WITHHELD as WITHHELD


def largest_upload(*, session: Session, space_id: int) -> int:
    """The most rows of any dataset in the space (0 before any rows arrived)."""
    return session.scalar(select(func.max(Dataset.n_rows))
                          .where(Dataset.patient_space_id == space_id)) or 0


def view(*, session: Session, role: str | None = "admin") -> PatientBudgetOut:
    """The budget, its filter order, and, for the tables' holders (``TABLE_HOLDERS``), the
    spend of the most-spent live block: which patients share which tables decides it, so for
    every other role it would say which tables share patients (null, and ``withheld`` says
    why)."""
    space = spaces.organisation(session=session)
    figures: dict[str, Any] = {"spent_epsilon": None, "remaining_epsilon": None,
                               "withheld": WITHHELD}
    if role in TABLE_HOLDERS:
        worst = block_spend.most_spent(block_spend.spends(
            session=session, guard=space.guard,
            blocks=spaces.live_blocks(session=session, space_id=space.id)))
        spent = 0.0 if worst is None else worst.epsilon
        figures = {"spent_epsilon": finite_or_none(spent),
                   "remaining_epsilon": max(space.budget_epsilon - spent, 0.0),
                   "withheld": None}
    return PatientBudgetOut(
        epsilon=space.budget_epsilon, delta=space.budget_delta, filter_order=space.filter_order,
        chain_records=space.chain_head_seq, chain_head_hash=space.chain_head_hash,
        id_scheme=space.id_scheme, **figures)


def change(*, session: Session, budget: PatientBudgetChange) -> PatientSpace:
    """Set the organisation's per-patient budget, in the caller's transaction.

    The space lock is taken before the uploads are read, as an upload takes it before it is
    checked against the delta: the two cannot pass each other.

    Raises:
        InvalidRequest: delta above 1/(10 n) for the largest upload in the space (422).
        BudgetBelowSpend: the most-spent live block has spent or reserved more (409).
    """
    space = spaces.lock_space(session=session, space_id=spaces.organisation(session=session).id)
    rows = largest_upload(session=session, space_id=space.id)
    if rows:
        check_delta(budget.delta, rows, field="delta")
    return block_spend.change_budget(session=session, space_id=space.id,
                                     epsilon=budget.epsilon, delta=budget.delta)


def verify(*, session: Session) -> tuple[PatientSpace, SpaceChainVerification]:
    """The organisation's space and its budget chain, recomputed."""
    space = spaces.organisation(session=session)
    return space, space_chain.verify(session=session, space=space)
