"""Ledger errors, mapped to problem+json once in core.errors."""

from app.core.errors import Conflict


class BudgetExceeded(Conflict):
    kind, title = "budget-exceeded", "Privacy budget exceeded"


class BudgetBelowSpend(Conflict):
    kind, title = "budget-below-spend", "Budget below what is already spent"


class PatientIdsRequired(Conflict):
    kind, title = "patient-ids-required", "The dataset's patients are not keyed"
