"""Response shapes of the ledger API."""

from app.core.schemas import ResponseModel


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
