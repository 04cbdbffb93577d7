"""The dataset page's per-patient section (``dataset.html``), from the report's
``patient_budget`` (``app.reports.patient_schemas``): plain values the template escapes."""

from typing import Any

from app.reports.html import MISSING, eps, num, table, when
from app.reports.patient_schemas import PatientBudgetView


def patient_facts(view: PatientBudgetView | None) -> list[tuple[str, str]]:
    """The budget, what the most-spent patients have used and what the next release can use."""
    if view is None:
        return []
    where = ("the organisation's patient space (its private uploads share it)"
             if view.space == "organisation" else "the dataset's own (its patients are in no "
             "other table)")
    return [
        ("Per-patient budget", f"ε = {num(view.epsilon, 'g')}, δ = {num(view.delta, 'g')}; "
         f"{where}"),
        *([("Spent ε by the dataset's most-spent patients", view.withheld)]
          if view.withheld else [
              ("Spent ε by the dataset's most-spent patients",
               eps(view.spent_epsilon, non_private=view.spent_epsilon is None)),
              ("What they have left", f"ε = {num(view.remaining_epsilon, '.4g')}")]),
        ("Per-patient filter", f"Rényi filter at the fixed order {num(view.filter_order, 'g')}"),
    ]


def _datasets(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def blocks_table(view: PatientBudgetView | None) -> dict[str, Any] | None:
    """The dataset's blocks (null for the roles that may not read them); sizes where shown."""
    if view is None or view.blocks is None:
        return None
    sizes = any(b.size is not None for b in view.blocks)
    rows = [
        [
            str(b.id), _datasets(b.datasets), *([num(b.size)] if sizes else []),
            "live" if b.live else f"split {when(b.closed_at)}", when(b.created_at),
            eps(b.spent_epsilon, non_private=b.spent_epsilon is None),
        ]
        for b in view.blocks
    ]
    headers = [("Block", True), ("Its patients' datasets", False),
               *([("Patients (exact)", True)] if sizes else []), ("State", False),
               ("Since", False), ("Spent ε (per-patient filter)", True)]
    return table("Blocks of this dataset's patients (patients in exactly the same datasets)",
                 headers, rows)


def block_timeline_table(view: PatientBudgetView | None) -> dict[str, Any] | None:
    """Each block's spend after each charged release on its datasets."""
    if view is None or view.blocks is None:
        return None
    rows = [
        [str(b.id), str(p.entry_id), str(p.dataset_id), when(p.at),
         eps(p.epsilon, non_private=p.epsilon is None)]
        for b in view.blocks for p in b.timeline
    ]
    if not rows:
        rows = [["", MISSING, MISSING, "no release has charged these patients yet", MISSING]]
    headers = [("Block", True), ("Ledger entry", True), ("On dataset", True),
               ("Charged at", False), ("Block's spent ε after", True)]
    return table("The blocks' spend over time", headers, rows)
