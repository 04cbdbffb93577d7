"""The organisation's per-patient budget across domains: each change with its audit event (and
the scoring cache, whose model statements quote the budget) in one transaction.

The routes (``app.api.patient_budget``) call one of these and return.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets.patients import patient_budget
from app.ledger.schemas import PatientBudgetChange, PatientBudgetOut, SpaceChainVerification
from app.registry import service as registry_service


def read(*, session: Session, role: str | None) -> PatientBudgetOut:
    return patient_budget.view(session=session, role=role)


def change(*, session: Session, budget: PatientBudgetChange,
           principal: Principal) -> PatientBudgetOut:
    """Set the budget and record the change (from, to) in the audit log; the space's own
    budget chain records it too (``app.ledger.space_chain``).

    Raises:
        As ``patient_budget.change`` (422 for a delta above 1/(10 n), 409 below the spend).
    """
    before = patient_budget.view(session=session)
    space = patient_budget.change(session=session, budget=budget)
    audit.record(session=session, principal=principal, action=Action.PATIENT_BUDGET_CHANGED,
                 target=f"patient_space/{space.id}",
                 detail={"from": {"epsilon": before.epsilon, "delta": before.delta},
                         "to": budget.model_dump(mode="json"),
                         "chain_head_hash": space.chain_head_hash})
    registry_service.scoring_models.forget_on_commit(session)  # statements quote the budget
    return patient_budget.view(session=session)


def verify(*, session: Session, principal: Principal) -> SpaceChainVerification:
    """Recompute the budget chain and record the verification (its outcome and head)."""
    space, result = patient_budget.verify(session=session)
    audit.record(session=session, principal=principal, action=Action.PATIENT_BUDGET_VERIFIED,
                 target=f"patient_space/{space.id}",
                 detail={"valid": result.valid, "records": result.records,
                         "head_hash": result.head_hash})
    return result
