"""What a person reads about a ledger's figures and a dataset's erasure, in one place.

One epsilon per release is the headline: its own tight figure by the PLD accountant. The
dataset's Rényi filter works with another figure, each release's RDP at the filter's one fixed
order, which it adds up and converts to epsilon once at the budget delta; reports show that
figure only where admission uses it (a dataset with a filter), with one sentence of why the two
differ. The naive sum of the releases' tight figures is compared with the composed spend
honestly: composition saves, or, at one order, may cost more. Erasure removes the rows; the
ledger, the models and every DP release made from them stay, and the reports say so.
"""

import math
from datetime import datetime

from sqlalchemy.orm import Session

from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy.figures import epsilon_text as rounded_up
from app.privacy.figures import round_down
from app.privacy.filter import RenyiFilter


def erased_on(at: datetime | None) -> str | None:
    """The erasure's date (UTC, ISO), or None when the rows were not erased."""
    return None if at is None else at.date().isoformat()


def dataset_erasure(at: datetime | None) -> str | None:
    """The dataset report's erasure line (None: the rows were not erased)."""
    day = erased_on(at)
    if day is None:
        return None
    return f"Rows erased on {day}: the ledger and the DP releases remain."


def model_erasure(at: datetime | None) -> str | None:
    """The model card's erasure line (None: the training rows were not erased)."""
    day = erased_on(at)
    if day is None:
        return None
    return (f"The training rows were erased on {day}; this model is a DP release of them and "
            "remains in use under its guarantee.")


def filter_rdp(entry: LedgerEntry, guard: RenyiFilter | None) -> float | None:
    """The entry's charged part as RDP at the filter's order: what admission adds up. None
    without a filter, with nothing charged, or for a non-private entry (infinite)."""
    if guard is None or entry.charged_steps <= 0:
        return None
    rdp = ledger_spend.entry_rdp_at(entry, guard.order)
    return rdp if math.isfinite(rdp) else None


def job_filter_rdp(*, session: Session, job_id: int, dataset: ledger_spend.Budgeted
                   ) -> float | None:
    """The job's ledger entry as the filter counts it (see ``filter_rdp``)."""
    guard = ledger_spend.filter_of(dataset)
    if guard is None:
        return None
    entries = ledger_spend.list_entries(session=session, dataset_id=dataset.id)
    entry = next((e for e in entries if e.job_id == job_id), None)
    return None if entry is None else filter_rdp(entry, guard)


def figures_note(order: float | None) -> str:
    """Why a release's headline epsilon and the filter's figure differ, for a filter at
    ``order`` ('' without a filter)."""
    if order is None:
        return ""
    return (
        "Each release's ε is its headline guarantee, its own tight figure by the PLD "
        f"accountant; the filter's figure is the same release's RDP at the filter's one fixed "
        f"order {order:g}, which the filter adds up across releases chosen one after "
        "another (what makes admission sound) and converts to ε once at the budget δ, a looser "
        "account than each release's own PLD figure."
    )


def composition_note(*, composed: float, naive: float, releases: int, filtered: bool) -> str:
    """The composed spend against the naive sum of the releases' tight figures, in words: what
    composition saves, or what it costs more and why; '' for fewer than two releases, an
    infinite spend, or equal figures."""
    if releases < 2 or not (math.isfinite(composed) and math.isfinite(naive)):
        return ""
    if math.isclose(composed, naive, rel_tol=1e-9, abs_tol=1e-12):
        return ""
    if composed < naive:  # what is saved is never overstated: rounded down
        return (f"Composition saves ε = {round_down(naive - composed, 4):g} against the sum of "
                "each release's tight figure.")
    why = ("the filter composes RDP at one order, which is looser than each release's own PLD "
           "figure" if filtered else "RDP composition, converted to ε once, is looser here "
           "than each release's own PLD figure")
    return (f"Composition here costs ε = {rounded_up(composed - naive, digits=4)} more than the "
            f"sum of each release's tight figure, because {why}.")
