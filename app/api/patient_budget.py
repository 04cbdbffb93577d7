"""The organisation's per-patient budget: thin routes over app.flows.patient_budget."""

from typing import Annotated

from fastapi import APIRouter

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.flows import patient_budget as patient_budget_flow
from app.ledger.schemas import PatientBudgetChange, PatientBudgetOut, SpaceChainVerification

router = APIRouter(prefix="/v1/patient-budget", tags=["ledger"], route_class=JsonRoute)


@router.get("")
def get_patient_budget(
    session: SessionDep,
    principal: Annotated[Principal, require_roles("privacy_officer", "data_steward")],
) -> PatientBudgetOut:
    """The organisation's per-patient budget (its most-spent patients' spend: stewards)."""
    return patient_budget_flow.read(session=session, role=principal.role)


@router.put("", responses=problems(409))
def change_patient_budget(
    body: PatientBudgetChange, session: SessionDep,
    principal: Annotated[Principal, require_roles()],
) -> PatientBudgetOut:
    """Raise or lower the per-patient budget (admin); 409 below what is spent, chained."""
    return patient_budget_flow.change(session=session, budget=body, principal=principal)


@router.get("/verify")
def verify_patient_budget(
    session: SessionDep, principal: Annotated[Principal, require_roles("privacy_officer")],
) -> SpaceChainVerification:
    """Recompute the per-patient budget's hash chain and name the first record that breaks it."""
    return patient_budget_flow.verify(session=session, principal=principal)
