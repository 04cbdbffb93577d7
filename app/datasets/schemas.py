"""Request and response bodies of the datasets API."""

from datetime import datetime
from typing import Literal

from pydantic import Field

from app.core.schemas import (
    NO_CONTROL_CHARACTERS,
    RequestModel,
    ResponseModel,
    register_ranges,
)

MIN_ROWS, MAX_ROWS = 100, 2_000_000


class SyntheticSource(RequestModel):
    kind: Literal["synthetic"]
    n_rows: int = Field(ge=MIN_ROWS, le=MAX_ROWS, description="patients to generate")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)


@register_ranges
class PrivacyBudget(RequestModel):
    epsilon: float = Field(gt=0, le=100, description="total epsilon the dataset may spend")
    delta: float = Field(gt=0, lt=1, description="must also be < 1 / n_rows")


@register_ranges
class DatasetCreate(RequestModel):
    name: str = Field(min_length=1, max_length=200, pattern=NO_CONTROL_CHARACTERS)
    source: SyntheticSource
    privacy_budget: PrivacyBudget | None = None
    public: bool = False


class BudgetOut(ResponseModel):
    epsilon: float | None
    delta: float | None


class DatasetOut(ResponseModel):
    id: int
    name: str
    source: dict[str, object]
    rows: int
    training_rows: int
    holdout_rows: int
    public: bool
    privacy_budget: BudgetOut
    created_at: datetime
