"""Request and response bodies of the datasets API."""

from datetime import date
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from app.core.schemas import (
    NO_CONTROL_CHARACTERS,
    Page,
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.datasets.models import Dataset, DatasetState, UploadState
from app.datasets.schema.dataset_schema import DatasetSchema
from app.privacy.annotations import PUBLIC, Released
from app.privacy.releases import Release

MIN_ROWS, MAX_ROWS = 100, 2_000_000


ROWS = Released(Release.PUBLIC_BY_CONVENTION)
OVERLAP = Released(Release.INTAKE, note="exact counts of an upload's patients known to the "
                   "organisation's earlier tables (DatasetOut.patients): served only to admins "
                   "and data stewards, who hold the tables; null for others")
IMPUTED = Released(Release.INTAKE, note="exact counts of values imputed in an upload: served only "
                   "to admins and data stewards, who hold the table; null for every other role")
UPLOAD_FACTS = Released(Release.INTAKE, note="exact facts of a steward's own file: its size and "
                        "SHA-256, whether and when it passed its checks, and a failed ingest's "
                        "problem (its rows and columns): served only to admins and data stewards, "
                        "who hold it")
IGNORED_COLUMNS = Released(Release.PUBLIC_INPUT, note="names of columns in an upload's header "
                           "that its schema ignores: the caller's own header, no value of any row")
WARNINGS = Released(Release.INTAKE, Release.PUBLIC_INPUT, note="that the upload's rows equal an "
                    "earlier dataset's (an equality of private tables): served only to admins and "
                    "data stewards; null for others")
SEED = Released(Release.PUBLIC_INPUT, note="the request's generator seed; it regenerates every "
                "synthetic row, so only admins and data stewards see it")


class SyntheticSource(RequestModel):
    kind: Literal["synthetic"]
    n_rows: int = Field(ge=MIN_ROWS, le=MAX_ROWS, description="patients to generate")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    shift: Literal["phq9_and_outcome", "subgroup_effect"] | None = Field(
        default=None, description="a documented variant of the generator "
        "(app.datasets.synthetic): phq9_and_outcome, a change for follow-up cohorts (PHQ-9 "
        "scores move up and the outcome model changes); subgroup_effect, a cohort whose "
        "patients aged 65 and over follow another outcome model (for fairness checks)")


class UploadSource(RequestModel):
    """The clinic's own table: registered with a declared schema, rows sent by
    ``PUT /v1/datasets/{id}/data`` (CSV or Parquet)."""

    kind: Literal["upload"]


MAX_UNION_MEMBERS = 16


class UnionSource(RequestModel):
    """A declared union of the organisation's earlier cohorts of one schema (a training
    dataset and its follow-ups, say): its rows are theirs, each patient once (the row of the
    last member listed that holds them), and every release on it charges every patient of
    every member under the per-patient budget (``app.datasets.union``)."""

    kind: Literal["union"]
    datasets: list[Annotated[int, Field(ge=1, le=2**31 - 1)]] = Field(
        min_length=2, max_length=MAX_UNION_MEMBERS,
        description="the member datasets, oldest first: private uploads of the organisation, "
        "ready, labelled, of one declared schema, each once")

    @field_validator("datasets")
    @classmethod
    def _distinct(cls, members: list[int]) -> list[int]:
        if len(set(members)) != len(members):
            raise ValueError("each member dataset is listed once")
        return members


Source = Annotated[SyntheticSource | UploadSource | UnionSource, Field(discriminator="kind")]


@register_ranges
class PrivacyBudget(RequestModel):
    epsilon: PrivacyNumber = Field(gt=0, le=100,
                                   description="total epsilon the dataset may spend")
    delta: PrivacyNumber = Field(gt=0, lt=1, description="must also be at most 1 / (10 n_rows)")


class FollowUp(RequestModel):
    """The table is a later cohort of a model's patients: what monitoring runs measure it on."""

    model_id: int = Field(ge=1, le=2**31 - 1, description="the model it follows")
    period_start: date = Field(description="first day its rows cover (YYYY-MM-DD)")
    period_end: date = Field(description="last day its rows cover, on or after period_start")
    labelled: bool = Field(
        default=True, description="false: an unlabelled follow-up (features only, an upload): "
        "its table has every column of the model's schema but the outcome (an outcome column "
        "is refused), so monitoring measures its data drift only; nothing trains or "
        "evaluates on it")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.period_end < self.period_start:
            raise ValueError("period_end must be on or after period_start")
        return self


FOLLOW_UP_PUBLIC = Released(Release.PUBLIC_INPUT)


class FollowUpOut(ResponseModel):
    model_id: Annotated[int, FOLLOW_UP_PUBLIC]
    period_start: Annotated[date, FOLLOW_UP_PUBLIC]
    period_end: Annotated[date, FOLLOW_UP_PUBLIC]
    labelled: Annotated[bool, FOLLOW_UP_PUBLIC] = Field(
        description="false: features only (no outcome column)")


@register_ranges
class DatasetCreate(RequestModel):
    name: str = Field(min_length=1, max_length=200, pattern=NO_CONTROL_CHARACTERS)
    source: Source
    declared_schema: DatasetSchema | None = Field(
        default=None, alias="schema",
        description="the declared columns (required for an upload; the synthetic generator "
        "has its own)",
    )
    privacy_budget: PrivacyBudget | None = None
    public: bool = False
    follow_up: FollowUp | None = Field(
        default=None, description="a later cohort of a model's patients (monitoring): its "
        "schema is the model's (taken from it when omitted)")


class SourceOut(ResponseModel):
    kind: Annotated[str, PUBLIC] = Field(validation_alias="source_kind")
    n_rows: Annotated[int | None, ROWS] = Field(description="null until an upload's rows arrive")
    seed: Annotated[int | None, SEED] = Field(
        description="the generator's seed regenerates every row: shown to admins and data stewards "
        "only (null for other roles)"
    )
    datasets: Annotated[list[int] | None, PUBLIC] = Field(
        default=None, validation_alias="union_of",
        description="a union's member datasets in the order declared (null: not a union)")


class BudgetOut(ResponseModel):
    epsilon: Annotated[float | None, PUBLIC] = Field(validation_alias="budget_epsilon")
    delta: Annotated[float | None, PUBLIC] = Field(validation_alias="budget_delta")
    filter_order: Annotated[float | None, PUBLIC] = Field(
        description="the Rényi filter's order, fixed at registration from the budget (null: public "
        "dataset, no filter)"
    )


class PatientOverlapOut(ResponseModel):
    """An upload's patients against the organisation's earlier tables
    (``app.datasets.patients.patient_index.Overlap``): exact counts about private data."""

    patients: Annotated[int, OVERLAP] = Field(
        description="patients (rows) in this upload")
    already_known: Annotated[int, OVERLAP] = Field(
        description="of them, patients an earlier dataset of the organisation holds (they share "
        "their spend with it)")
    new: Annotated[int, OVERLAP] = Field(
        description="patients no earlier dataset holds")
    shared_with: Annotated[dict[str, int], OVERLAP] = Field(
        description="by earlier dataset id, how many of this upload's patients it holds")


def same_rows_warning(dataset_id: int) -> str:
    return (f"this table's rows equal dataset {dataset_id}'s: its patients share their spend "
            "with that dataset (no second budget); register it again only if you meant to")


class DatasetOut(ResponseModel):
    id: Annotated[int, PUBLIC]
    name: Annotated[str, PUBLIC]
    source: SourceOut
    rows: Annotated[int, ROWS] = Field(validation_alias="n_rows")
    training_rows: Annotated[int, ROWS] = Field(validation_alias="n_train")
    holdout_rows: Annotated[int, ROWS] = Field(validation_alias="n_holdout")
    calibration_rows: Annotated[int, ROWS] = Field(validation_alias="n_calibration")
    evaluation_rows: Annotated[int, ROWS] = Field(validation_alias="n_evaluation")
    public: Annotated[bool, PUBLIC]
    privacy_budget: BudgetOut
    state: Annotated[DatasetState, PUBLIC] = Field(
        description="awaiting_data | receiving (one upload is sending its rows) | ready | erased")
    dataset_schema: Annotated[dict[str, Any] | None, PUBLIC] = Field(
        serialization_alias="schema", validation_alias="schema_json",
        description="the declared schema (features with public bounds, outcome, subgroups)",
    )
    schema_hash: Annotated[str | None, PUBLIC]
    imputed: Annotated[dict[str, int] | None, IMPUTED] = Field(
        description="values imputed with the reference, per feature: an exact count of the "
        "uploaded table, shown to admins and data stewards only (null for other roles)"
    )
    ignored_columns: Annotated[list[str] | None, IGNORED_COLUMNS] = Field(
        default=None, description='the uploaded file\'s columns its schema ignores '
        '(extra_columns "ignore": never read nor kept; null: none)')
    patients: PatientOverlapOut | None = Field(
        default=None, description="the upload's patients against the organisation's earlier "
        "tables: exact counts, shown to admins and data stewards only (null for other roles, "
        "before the rows arrive, and outside the organisation's patient space)")
    warnings: Annotated[list[str] | None, WARNINGS] = Field(
        default=None, description="what the tables' holders should know of the upload (that its "
        "rows equal an earlier dataset's): admins and data stewards only (null for others)")
    follow_up: FollowUpOut | None = Field(
        default=None, description="the model this later cohort follows and the period its "
        "rows cover (null: not a follow-up)")
    data_erased_at: Annotated[UtcDatetime | None, PUBLIC]
    created_at: Annotated[UtcDatetime, PUBLIC]

    @classmethod
    def from_orm_row(
        cls, dataset: Dataset, *, show_seed: bool = False, show_intake: bool = False
    ) -> Self:
        """The dataset's columns; ``source`` and ``privacy_budget`` group some of them.

        The seed regenerates every row, so it is shown only when ``show_seed``; the imputed
        counts, the patient overlap and the warnings are exact facts of the rows, shown only
        when ``show_intake`` (both: to the roles that hold the tables).
        """
        synthetic = dataset.source_kind == "synthetic"
        source = SourceOut.model_validate({
            "source_kind": dataset.source_kind,
            "n_rows": dataset.n_rows if synthetic or dataset.state != "awaiting_data" else None,
            "seed": dataset.seed if show_seed and synthetic else None,
            "union_of": dataset.union_of,
        })
        overlap = dataset.patient_overlap if show_intake else None
        same = dataset.rows_equal_dataset_id
        return cls.from_row(
            dataset, source=source, privacy_budget=dataset,
            imputed=dataset.imputed if show_intake else None,
            patients=None if overlap is None else PatientOverlapOut.model_validate(overlap),
            follow_up=None if dataset.follow_up_model_id is None else FollowUpOut(
                model_id=dataset.follow_up_model_id,
                period_start=dataset.follow_up_period_start,  # type: ignore[arg-type]
                period_end=dataset.follow_up_period_end,  # type: ignore[arg-type]
                labelled=dataset.labelled is not False),
            warnings=([] if same is None else [same_rows_warning(same)]) if show_intake else None)


class DatasetPage(Page[DatasetOut]):
    pass


class UploadOut(ResponseModel):
    """A spooled upload (``GET /v1/uploads/{id}``): admins and data stewards only."""

    id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    state: Annotated[UploadState, UPLOAD_FACTS] = Field(
        description="queued | ingesting | succeeded | failed")
    media_type: Annotated[str, PUBLIC] = Field(
        description="the Content-Type the body was sent with (sent as application/octet-stream: "
        "the Parquet type its bytes showed)")
    size_bytes: Annotated[int, UPLOAD_FACTS] = Field(description="the body's size as sent")
    sha256: Annotated[str, UPLOAD_FACTS] = Field(
        description="the SHA-256 of the body as sent (the kept file's name, unless the schema "
        "ignored some of its columns)")
    created_at: Annotated[UtcDatetime, PUBLIC]
    finished_at: Annotated[UtcDatetime | None, UPLOAD_FACTS]
    dataset: DatasetOut | None = Field(
        default=None, description="once succeeded: the dataset, as the upload's synchronous "
        "answer (200) gives it")
    problem: Annotated[dict[str, Any] | None, UPLOAD_FACTS] = Field(
        default=None, description="once failed: the problem+json the synchronous answer gives (its "
        "status, e.g. 422 invalid-table with the errors)")
