"""Response shapes of the ledger API."""

from pydantic import Field

from app.core.schemas import PrivacyNumber, RequestModel, ResponseModel, register_ranges


class InvalidRecord(ResponseModel):
    """The first ledger_event that breaks the chain (``id`` None: a missing or uncovered row)."""

    id: int | None
    seq: int | None
    reason: str


class ChainVerification(ResponseModel):
    dataset_id: int
    valid: bool
    budget_anchored: bool
    records: int
    first_invalid: InvalidRecord | None
    head_hash: str


class SpaceChainVerification(ResponseModel):
    """A patient space's budget chain, recomputed (``app.ledger.space_chain.verify``)."""

    valid: bool
    budget_anchored: bool = Field(description="the last record is the budget the space has now")
    records: int
    first_invalid: InvalidRecord | None
    head_hash: str


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

    epsilon: float
    delta: float
    filter_order: float = Field(description="the per-patient Rényi filter's fixed order")
    spent_epsilon: float | None = Field(
        description="the composed spend, by the per-patient filter, of the most-spent patients "
        "(the live block of patients with the most spent; 0 before any release): admins and "
        "data stewards only, null for others (``withheld``)")
    remaining_epsilon: float | None = Field(
        description="what those patients have left: admins and data stewards only")
    withheld: str | None = Field(
        default=None, description="why the spend figures are null for this role")
    chain_records: int = Field(description="records (budgets and block changes) in the "
                                     "space's hash chain")
    chain_head_hash: str = Field(description="the hash of its last record")
    id_scheme: str | None = Field(
        default=None, description="the keyed-digest scheme of the space's patient ids, "
        "recorded when the space was made: every table is keyed into it the same way")
