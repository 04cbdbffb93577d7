"""Response shapes of the ledger API."""

from typing import Annotated

from pydantic import Field

from app.core.schemas import PrivacyNumber, RequestModel, ResponseModel, register_ranges
from app.privacy.annotations import LEDGER, PUBLIC, Released
from app.privacy.releases import Release

BLOCK_SPEND = Released(Release.INTAKE, note="the spend of the most-spent live block: it depends "
                       "on which tables share patients (which blocks exist), so admins and data "
                       "stewards only; null for others")


class InvalidRecord(ResponseModel):
    """The first ledger_event that breaks the chain (``id`` None: a missing or uncovered row)."""

    id: Annotated[int | None, LEDGER]
    seq: Annotated[int | None, LEDGER]
    reason: Annotated[str, LEDGER]


class ChainVerification(ResponseModel):
    dataset_id: Annotated[int, LEDGER]
    valid: Annotated[bool, LEDGER]
    budget_anchored: Annotated[bool, LEDGER]
    records: Annotated[int, LEDGER]
    first_invalid: InvalidRecord | None
    head_hash: Annotated[str, LEDGER]


class SpaceChainVerification(ResponseModel):
    """A patient space's budget chain, recomputed (``app.ledger.space_chain.verify``)."""

    valid: Annotated[bool, LEDGER]
    budget_anchored: Annotated[bool, LEDGER] = Field(
        description="the last record is the budget the space has now")
    records: Annotated[int, LEDGER]
    first_invalid: InvalidRecord | None
    head_hash: Annotated[str, LEDGER]


@register_ranges
class PatientBudgetChange(RequestModel):
    """The organisation's per-patient budget (``PUT /v1/patient-budget``)."""

    epsilon: PrivacyNumber = Field(
        gt=0, le=100, description="each patient's total epsilon, across every release on "
        "every table of the organisation that holds them")
    delta: PrivacyNumber = Field(
        gt=0, lt=1, description="must also be at most 1 / (10 n) for the largest private "
        "upload n the organisation holds")


class PatientBudgetOut(ResponseModel):
    """The organisation's per-patient budget and what its most-spent patients have used."""

    epsilon: Annotated[float, PUBLIC]
    delta: Annotated[float, PUBLIC]
    filter_order: Annotated[float, PUBLIC] = Field(
        description="the per-patient Rényi filter's fixed order")
    spent_epsilon: Annotated[float | None, BLOCK_SPEND] = Field(
        description="the composed spend, by the per-patient filter, of the most-spent patients "
        "(the live block of patients with the most spent; 0 before any release): admins and data "
        "stewards only, null for others (``withheld``)")
    remaining_epsilon: Annotated[float | None, BLOCK_SPEND] = Field(
        description="what those patients have left: admins and data stewards only")
    withheld: Annotated[str | None, PUBLIC] = Field(
        default=None, description="why the spend figures are null for this role")
    chain_records: Annotated[int, LEDGER] = Field(
        description="records (budgets and block changes) in the space's hash chain")
    chain_head_hash: Annotated[str, LEDGER] = Field(description="the hash of its last record")
    id_scheme: Annotated[str | None, PUBLIC] = Field(
        default=None, description="the keyed-digest scheme of the space's patient ids, recorded "
        "when the space was made: every table is keyed into it the same way")
