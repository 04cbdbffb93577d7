"""The dataset report's per-patient figures: the patient space's budget, what the dataset's next
release can use, and the blocks of its patients with their spend over time.

Every release on a dataset charges every patient in it, and each of its patients is also in
the other datasets of their block (``app.ledger.spaces``), so what its next release can use is
what its most-spent live block has left under the space's per-patient filter: the figure
admission checks (``app.ledger.admission``). The spends are functions of the ledger and of
which blocks exist; the blocks' sizes are exact counts about private data. Who reads what:

- everyone who reads the report: the budget, its filter and the per-patient rule in words;
- data stewards and admins only (the tables' holders): the most-spent block's spend, what
  remains, and the blocks (their datasets, sizes, spend over time). Each depends on which
  other tables hold the dataset's patients: for any other role, an exact membership oracle.
"""

from typing import Any

from sqlalchemy.orm import Session

from app.auth.audit import TABLE_HOLDERS
from app.datasets.models import Dataset
from app.ledger import block_spend, spaces
from app.privacy.accounting import finite_or_none
from app.privacy.figures import epsilon_text
from app.privacy.filter import RenyiFilter
from app.privacy.terms import PATIENT_SPEND_WITHHELD as WITHHELD
from app.privacy.terms import per_patient
from app.reports.patient_schemas import BlockPointView, PatientBlockView, PatientBudgetView

BLOCK_READERS = TABLE_HOLDERS
"""Roles that see the dataset's blocks (their datasets and spend over time) and its most-spent
patients' spend: which tables share patients is an exact fact about private data (an overlap of
id sets, released without a mechanism), and every block spend depends on it, so only the
tables' holders read them; every other role reads the budget and the rule in words."""
SIZE_READERS = TABLE_HOLDERS
"""Roles that also see each block's size: the tables' holders."""


def _block_view(spent: block_spend.BlockSpend, guard: RenyiFilter,
                *, sizes: bool) -> PatientBlockView:
    points = block_spend.timeline(spent, guard)
    at_close = points[-1].epsilon if points else 0.0
    block = spent.block
    return PatientBlockView(
        id=block.id, datasets=list(block.datasets), size=block.size if sizes else None,
        live=block.closed_at is None, created_at=block.created_at, closed_at=block.closed_at,
        spent_epsilon=finite_or_none(at_close), spent_epsilon_text=epsilon_text(at_close),
        timeline=[BlockPointView(entry_id=p.entry_id, dataset_id=p.dataset_id, at=p.at,
                                 epsilon=finite_or_none(p.epsilon)) for p in points])


def patient_budget(*, session: Session, dataset: Dataset,
                   role: str | None) -> PatientBudgetView | None:
    """The per-patient figures as ``role`` may read them (None: no block at all); None for a
    dataset in no patient space (public)."""
    if dataset.patient_space_id is None:
        return None
    space = session.get(spaces.PatientSpace, dataset.patient_space_id)
    if space is None:
        return None
    guard = space.guard
    figures: dict[str, Any] = {"spent_epsilon": None, "spent_epsilon_text": WITHHELD,
                               "remaining_epsilon": None, "withheld": WITHHELD}
    blocks = None
    if role in BLOCK_READERS:
        live = spaces.blocks_of(session=session, space_id=space.id, dataset_id=dataset.id)
        worst = block_spend.most_spent(block_spend.spends(session=session, guard=guard,
                                                          blocks=live))
        spent = 0.0 if worst is None else worst.epsilon
        figures = {"spent_epsilon": finite_or_none(spent),
                   "spent_epsilon_text": epsilon_text(spent),
                   "remaining_epsilon": max(space.budget_epsilon - spent, 0.0),
                   "withheld": None}
        ever = block_spend.blocks_ever(session=session, space_id=space.id,
                                       dataset_id=dataset.id)
        blocks = [_block_view(s, guard, sizes=role in SIZE_READERS)
                  for s in block_spend.spends(session=session, guard=guard, blocks=ever)]
    return PatientBudgetView(
        space=str(space.kind), epsilon=space.budget_epsilon, delta=space.budget_delta,
        filter_order=space.filter_order,
        statement=per_patient(str(space.kind), space.budget_epsilon, space.budget_delta),
        blocks=blocks, **figures)
