"""Request and response bodies of the jobs API. Every training field has a tuned default."""

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from app.core.schemas import RequestModel, ResponseModel, register_ranges


class PrivacyRequest(RequestModel):
    """Exactly one of ``target_epsilon`` and ``noise_multiplier``.

    ``noise_multiplier`` 0 means non-private training, allowed only on public datasets.
    ``delta`` defaults to the dataset's budget delta.
    """

    target_epsilon: float | None = Field(default=None, gt=0, le=100)
    noise_multiplier: float | None = Field(default=None, ge=0, le=100)
    delta: float | None = Field(default=None, gt=0, lt=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> "PrivacyRequest":
        if (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of target_epsilon and noise_multiplier")
        return self


class TrainingConfig(RequestModel):
    """Defaults chosen on the public generator (a seed no dataset uses), not on user data."""

    model: Literal["logistic", "mlp"] = "logistic"
    epochs: int = Field(default=20, ge=1, le=200)
    batch_size: int = Field(default=512, ge=8, le=65536, description="expected batch size")
    learning_rate: float = Field(default=0.5, gt=0, le=10)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    max_grad_norm: float = Field(default=1.0, gt=0, le=100, description="clip norm C")
    hidden_units: int = Field(default=16, ge=2, le=256, description="mlp only")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)


@register_ranges
class JobCreate(RequestModel):
    dataset_id: int = Field(ge=1)
    privacy: PrivacyRequest
    training: TrainingConfig = Field(default_factory=TrainingConfig)


class JobPrivacyOut(ResponseModel):
    target_epsilon: float | None
    noise_multiplier: float
    delta: float
    sample_rate: float
    steps: int
    max_grad_norm: float
    epsilon_planned: dict[str, float | None]


class ProgressOut(ResponseModel):
    epoch: int
    epochs: int
    epsilon_spent: float | None


class JobOut(ResponseModel):
    id: int
    dataset_id: int
    status: str
    privacy: JobPrivacyOut
    training: dict[str, Any]
    progress: ProgressOut
    model_id: int | None
    metrics: dict[str, Any] | None
    error: dict[str, str | None] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobPage(ResponseModel):
    items: list[JobOut]
    total: int
    limit: int
    offset: int


JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
