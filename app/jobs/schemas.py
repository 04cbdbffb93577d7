"""Request and response bodies of the jobs API. Every training field has a tuned default."""

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.core.ids import MAX_ID
from app.core.schemas import (
    Page,
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.families import DEFAULT_FAMILY
from app.jobs.family_field import family_enum, registered_family
from app.jobs.kinds.base import KIND_WORDS
from app.jobs.models import Job
from app.jobs.models import JobStatus as JobStatus  # the route's filter imports it here
from app.jobs.results import ServedResults
from app.jobs.search_schemas import SEARCH_KEY, SearchOut, SearchRequest
from app.privacy.accountant_names import with_pld_key
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release

FULL_BATCH_EPOCHS = 1000  # one step per epoch at q = 1
MINI_BATCH_EPOCHS = 20


ERROR_CODE = Released(Release.OPERATIONAL, Release.AUDIT, note="an error code and the exception's "
                      "type name; an audit's alarm quotes its epsilons")


class TaskPayload(BaseModel):
    """A task kind's typed payload on the queue (``worker.handlers``): what its handler's
    ``parse`` returns. Each kind declares its own, next to its handler or its API schema."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())


class PrivacyRequest(RequestModel):
    """Exactly one of ``target_epsilon`` and ``noise_multiplier``.

    ``noise_multiplier`` 0 means non-private training, allowed only on public datasets.
    ``delta`` defaults to the dataset's budget delta.
    """

    target_epsilon: PrivacyNumber | None = Field(default=None, gt=0, le=100)
    noise_multiplier: PrivacyNumber | None = Field(default=None, ge=0, le=100)
    delta: PrivacyNumber | None = Field(default=None, gt=0, lt=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> "PrivacyRequest":
        if (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ValueError("give exactly one of target_epsilon and noise_multiplier")
        return self


class TrainingConfig(RequestModel):
    """Defaults chosen on public data (generator seeds no dataset uses, public tables), never
    on user data.

    The default recipe (bench/utility.py and bench/proxy_study.py measure it): logistic model,
    full-batch DP gradient descent (q = 1: every record in every step, the least noise per unit
    of signal), 1000 steps (fewer where a small target epsilon needs it), Adam at lr 0.3 with
    beta1 0.9 and an epsilon of 5 noise standard deviations (``worker.optimizer``), the average
    of the last half of the iterates (free post-processing that cancels much of the noise), and
    a clip norm set by a public rule (``app.jobs.recipe``). Everything the optimizer computes
    comes from the noisy gradients, so it costs no privacy.
    """

    model: str = Field(default=DEFAULT_FAMILY, json_schema_extra=family_enum)
    epochs: int | None = Field(
        default=None, ge=1, le=1000,
        description=f"passes over the data; default {FULL_BATCH_EPOCHS} for full batch, "
        f"{MINI_BATCH_EPOCHS} otherwise, or fewer where a target epsilon needs it (the job "
        "shows the epochs planned)",
    )
    batch_size: int | None = Field(
        default=None, ge=8, le=65536,
        description="expected (Poisson) batch size; default: the whole training set (q = 1), "
        "or, where a full batch would hit the noise cap (below epsilon about 1.2 at delta "
        "1e-5) and the calibration part is small or the schema has 16 inputs or more, or "
        "where the calibration part is below its size floor at any epsilon, 256 or the whole "
        "training set when smaller (app.jobs.recipe.capped_regime)",
    )
    optimizer: Literal["adam", "sgd"] = Field(
        default="adam",
        description="what the noisy gradients drive (post-processing: the privacy charge is "
        "the same): adam, whose epsilon is 5 noise standard deviations, or sgd with momentum "
        "(default adam; plain sgd in the capped regime, as batch_size says)",
    )
    learning_rate: float | None = Field(
        default=None, gt=0, le=10,
        description="default: 0.3 for adam (0.1 for the mlp), 0.5 for sgd (app/jobs/recipe.py)",
    )
    momentum: float = Field(default=0.9, ge=0, lt=1, description="sgd's momentum; adam's beta1")
    max_grad_norm: float | None = Field(
        default=None, gt=0, le=100,
        description="clip norm C; default: a public rule on the row count, the schema's "
        "inputs and the planned noise, between 0.1 and 2 (app/jobs/recipe.py)",
    )
    tail_average: float = Field(
        default=0.5, ge=0, lt=1,
        description="the model is the average of the iterates of this last fraction of steps "
        "(0: the last iterate)",
    )
    hidden_units: int = Field(default=16, ge=2, le=256, description="mlp only")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    world_size: int = Field(
        default=1, ge=1, le=8,
        description="processes that train this one job together (torchrun with Opacus' "
        "distributed wrapper: one GPU each when the worker has that many, else CPU). The "
        "privacy plan is unchanged: the global sample rate, noise and steps are the same",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _registered_family(cls, value: Any) -> Any:
        """A registered family's name, refused with the error a ``Literal`` of the names
        gives, so a family registered later is accepted without an edit here."""
        return registered_family(value)


@register_ranges
class JobCreate(RequestModel):
    dataset_id: int = Field(ge=1, le=MAX_ID)
    privacy: PrivacyRequest
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    search: SearchRequest | None = Field(
        default=None, description="a hyper-parameter search over public candidates, charged "
        "as one repeat-and-select release (app/jobs/search.py); null: one run of training")


NOT_DP_SGD = ("null: the job is not DP-SGD (a monitoring run's or a comparison's one Gaussian "
              "release)")


class JobPrivacyOut(ResponseModel):
    target_epsilon: Annotated[float | None, LEDGER]
    noise_multiplier: Annotated[float, LEDGER]
    delta: Annotated[float, LEDGER]
    sample_rate: Annotated[float | None, LEDGER] = Field(description=NOT_DP_SGD)
    steps: Annotated[int | None, LEDGER] = Field(description=NOT_DP_SGD)
    max_grad_norm: Annotated[float | None, LEDGER] = Field(description=NOT_DP_SGD)
    epsilon_planned: Annotated[dict[str, float | None], LEDGER] = Field(
        description="the planned mechanism's epsilon under each accountant (null: infinite): rdp "
        "and pld (the headline PLD figure; its old key prv is kept, deprecated, for one release)"
    )

    @field_validator("epsilon_planned")
    @classmethod
    def _pld_key(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        return with_pld_key(value)


class ProgressOut(ResponseModel):
    epoch: Annotated[int, LEDGER] = Field(validation_alias="progress_epoch")
    epochs: Annotated[int | None, LEDGER] = Field(description=NOT_DP_SGD)
    epsilon_spent: Annotated[float | None, LEDGER]


class ErrorOut(ResponseModel):
    code: Annotated[str | None, ERROR_CODE] = Field(validation_alias="error_code")
    message: Annotated[str | None, ERROR_CODE] = Field(validation_alias="error")

    @classmethod
    def of(cls, job: Job) -> Self | None:
        """The job's error, or None when it has none."""
        return cls.model_validate(job) if job.error_code or job.error else None


class JobOut(ResponseModel):
    id: Annotated[int, PUBLIC]
    kind: Annotated[str, KIND_WORDS, PUBLIC] = Field(
        description="train; privacy_audit (details at /v1/audits/{id}); monitoring "
        "(/v1/monitoring-runs); comparison (/v1/comparisons/{id})")
    dataset_id: Annotated[int, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    privacy: JobPrivacyOut
    training: Annotated[dict[str, Any] | None, PUBLIC] = Field(
        description="the training request (null: the kind trains nothing, a monitoring run "
        "or a comparison)")
    payload: Annotated[dict[str, Any] | None, PUBLIC] = Field(
        default=None, description="the kind's own payload beside its training request: a "
        "monitoring run's or a comparison's models, a federated part's federation, an "
        "audit's request (null: a training job)")
    progress: ProgressOut
    model_id: Annotated[int | None, PUBLIC]
    metrics: ServedResults = Field(
        description="held-out metrics (train) or the audit's results (privacy_audit); null "
        "until the job has finished")
    error: ErrorOut | None
    search: SearchOut | None = Field(
        default=None, description="the job's hyper-parameter search as planned and charged "
        "(null: one run); its outcome is metrics.search")
    created_at: Annotated[UtcDatetime, PUBLIC]
    started_at: Annotated[UtcDatetime | None, OPERATIONAL]
    finished_at: Annotated[UtcDatetime | None, OPERATIONAL]

    @classmethod
    def from_orm_row(
        cls, job: Job, *, model_id: int | None, epsilon_planned: dict[str, float | None],
        search: SearchOut | None = None,
    ) -> Self:
        """The job's columns, grouped, with what is not one of them: the id of the model it
        produced, its planned epsilons (``jobs.service.planned_epsilon``) and its search
        (kept in the stored training request, shown apart)."""
        return cls.from_row(
            job,
            privacy=JobPrivacyOut.from_row(job, epsilon_planned=epsilon_planned),
            training=None if job.training is None else {
                k: v for k, v in job.training.items() if k != SEARCH_KEY},
            progress=job,
            model_id=model_id,
            error=ErrorOut.of(job),
            search=search,
        )


class JobStatusOut(ResponseModel):
    """A job's status poll (``GET /v1/jobs/{id}?view=status``): what changes while it runs,
    without its plan, training request and results (the full job is at ``href``)."""

    id: Annotated[int, PUBLIC]
    kind: Annotated[str, KIND_WORDS, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    progress: ProgressOut
    model_id: Annotated[int | None, PUBLIC]
    error: ErrorOut | None
    created_at: Annotated[UtcDatetime, PUBLIC]
    started_at: Annotated[UtcDatetime | None, OPERATIONAL]
    finished_at: Annotated[UtcDatetime | None, OPERATIONAL]
    href: Annotated[str, PUBLIC] = Field(
        description="the full job (its plan, training request and results)")

    @classmethod
    def of(cls, job: Job, *, model_id: int | None) -> Self:
        return cls.from_row(job, progress=job, model_id=model_id, error=ErrorOut.of(job),
                            href=f"/v1/jobs/{job.id}")


class JobPage(Page[JobOut]):
    pass

