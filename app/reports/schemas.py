"""The privacy reports as response models: per job, per dataset and per privacy audit.

The builders (``privacy_report``, ``audit_report``) return these; the routes serve them as JSON
and ``privacy_html`` / ``audit_html`` render the same objects as pages, so a page can never say
what the JSON does not. Field order is the JSON's key order.

Infinite epsilons (non-private training) are never numbers here (JSON has no Infinity): the
numeric field is null and an ``*_text`` of ``"infinity"`` (with ``non_private: true``) says what
null means. Timestamps are written as ``datetime.isoformat()`` gives them (``+00:00``), as the
reports always have.
"""

from typing import Annotated, Any

from pydantic import Field, model_validator

from app.core.schemas import ResponseModel
from app.jobs.models import JobStatus
from app.jobs.results import ServedResults
from app.jobs.search_schemas import SearchCharge, SearchOut
from app.ledger.models import EntryStatus
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release
from app.privacy_audit.schemas import AuditOut
from app.reports.patient_schemas import PatientBudgetView
from app.reports.release_schemas import ReleaseRef
from app.reports.report_types import Epsilon as Epsilon
from app.reports.report_types import ReportDatetime as ReportDatetime

Erased = Annotated[
    ReportDatetime | None,
    Field(description="when the dataset's rows were erased (null: they were not); the ledger "
          "and the DP releases made from them remain"),
]


_PRV_DEPRECATED = "renamed pld (the same figure); prv is kept for one release"


def _pld_from_prv(data: Any) -> Any:
    """Fill ``pld`` from the old key ``prv`` (stored per-epoch records, older callers) and
    ``prv`` from ``pld``: both keys carry the one figure while the alias lives."""
    if isinstance(data, dict):
        if "pld" not in data and "prv" in data:
            data = {**data, "pld": data["prv"]}
        if "prv" not in data and "pld" in data:
            data = {**data, "prv": data["pld"]}
    return data


LEDGER_ROWS_CALIBRATED = Released(Release.LEDGER, Release.PUBLIC_BY_CONVENTION,
                                  Release.DP_CALIBRATION)
OPERATIONAL_AUDITED = Released(Release.OPERATIONAL, Release.AUDIT)
ROWS = Released(Release.PUBLIC_BY_CONVENTION)


class EpsilonByAccountant(ResponseModel):
    """One mechanism's epsilon at its delta, by each accountant."""

    rdp: Annotated[Epsilon, LEDGER]
    pld: Annotated[Epsilon, LEDGER] = Field(
        description="the headline PLD accountant's figure; null: infinite")
    prv: Annotated[Epsilon, LEDGER] = Field(
        deprecated=_PRV_DEPRECATED, description="the same figure as pld")

    _pld = model_validator(mode="before")(_pld_from_prv)


class Accountants(ResponseModel):
    reported: Annotated[str, PUBLIC] = Field(
        description="the accountant whose epsilon the report states")
    composition: Annotated[str, PUBLIC] = Field(
        description="the accountant the ledger composes spend with")


class EpochEpsilon(ResponseModel):
    """Epsilon spent after one finished epoch, as the worker recorded it."""

    epoch: Annotated[int, LEDGER]
    pld: Annotated[Epsilon, LEDGER] = Field(
        description="the headline PLD accountant's figure; null: infinite")
    prv: Annotated[Epsilon, LEDGER] = Field(
        deprecated=_PRV_DEPRECATED, description="the same figure as pld")
    rdp: Annotated[Epsilon, LEDGER]

    _pld = model_validator(mode="before")(_pld_from_prv)


class Coverage(ResponseModel):
    """What the guarantee covers and what it does not."""

    covers: Annotated[list[str], PUBLIC]
    does_not_cover: Annotated[list[str], PUBLIC]


class IntendedUse(ResponseModel):
    purpose: Annotated[str, PUBLIC]
    users: Annotated[str, PUBLIC]
    decision_support_not_diagnosis: Annotated[bool, PUBLIC]
    out_of_scope: Annotated[list[str], PUBLIC]


class TrainingData(ResponseModel):
    """Public facts about the training data only: no statistic of the private rows."""

    dataset_id: Annotated[int, PUBLIC]
    dataset_name: Annotated[str, PUBLIC]
    source: Annotated[str, PUBLIC]
    synthetic: Annotated[bool, PUBLIC]
    public: Annotated[bool, PUBLIC]
    rows: Annotated[int, ROWS]
    training_rows: Annotated[int, ROWS]
    holdout_rows: Annotated[int, ROWS]
    note: Annotated[str, PUBLIC]
    rows_erased_at: Annotated[Erased, PUBLIC] = None


class HeldOutMetrics(ResponseModel):
    # The worker's held-out metrics as stored with the job, typed key by key
    # (app.jobs.results): the DP evaluation release and what was computed from it, with the
    # calibration record.
    values: ServedResults = Field(description="null until the job has finished")
    note: Annotated[str, PUBLIC] = Field(
        description="how the values were computed (one DP release on the evaluation rows; every "
        "figure computed from its noisy counts)")


class ModelCard(ResponseModel):
    outcome: Annotated[str, PUBLIC] = Field(
        description="what the model predicts: its schema's outcome label (else the outcome "
        "column's name), as every text of the card names it")
    intended_use: IntendedUse
    training_data: TrainingData
    metrics: HeldOutMetrics
    caveats: Annotated[list[str], PUBLIC]
    erasure: Annotated[str | None, PUBLIC] = Field(
        default=None, description="that the training rows were erased, and when; the model, a DP "
        "release of them, remains in use under its guarantee (null: they were not)")


class PrivacyTerms(ResponseModel):
    """Who is protected against what, and how (``app.privacy.terms``)."""

    neighbouring_relation: Annotated[str, PUBLIC]
    parts: Annotated[str, PUBLIC]
    filter: Annotated[str, PUBLIC]
    filter_order: Annotated[float | None, LEDGER] = Field(
        description="the Rényi filter's fixed order (null: none)")
    noise_source: Annotated[str, PUBLIC]


class JobPrivacyReport(ResponseModel):
    """A job's mechanism, sampling, noise, clipping, steps, delta, epsilon by accountant and
    per epoch, the guarantee in words, and its model card."""

    job_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    dataset_name: Annotated[str, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    privacy_unit: Annotated[str, PUBLIC]
    dataset_rows: Annotated[int, ROWS]
    training_rows: Annotated[int, ROWS]
    holdout_rows: Annotated[int, ROWS]
    rows_erased_at: Annotated[Erased, PUBLIC]
    mechanism: Annotated[str, LEDGER]
    non_private: Annotated[bool, LEDGER]
    sampling: Annotated[str, LEDGER]
    sample_rate: Annotated[float, LEDGER]
    expected_batch_size: Annotated[float, LEDGER]
    noise_multiplier: Annotated[float, LEDGER]
    clip_norm: Annotated[float, LEDGER]
    clipping: Annotated[str, LEDGER]
    steps: Annotated[int, LEDGER]
    steps_per_epoch: Annotated[int, LEDGER]
    epochs: Annotated[int, LEDGER]
    epochs_completed: Annotated[int, LEDGER]
    delta: Annotated[float, LEDGER]
    target_epsilon: Annotated[float | None, LEDGER]
    epsilon: EpsilonByAccountant = Field(description="the full planned run's epsilon")
    epsilon_text: Annotated[str, LEDGER] = Field(
        description="the reported epsilon rounded up, or 'infinity'")
    filter_rdp: Annotated[float | None, LEDGER] = Field(
        description="the filter's working figure: the job's charge (charged steps) as RDP at the "
        "dataset filter's order, what admission adds up (null: no filter, nothing charged, or "
        "non-private)")
    accountants: Accountants
    epsilon_spent: Annotated[float | None, LEDGER]
    epsilon_per_epoch: list[EpochEpsilon]
    search: SearchOut | None = Field(
        default=None, description="the job's hyper-parameter search as planned and charged "
        "(null: one run); the run's noise, sample rate and steps above are each run's")
    # The same stored held-out metrics as the model card's (see HeldOutMetrics).
    metrics: ServedResults
    metrics_note: Annotated[str, PUBLIC]
    statement: Annotated[str, LEDGER_ROWS_CALIBRATED]
    terms: PrivacyTerms
    coverage: Coverage
    model_card: ModelCard


class Budget(ResponseModel):
    epsilon: Annotated[float | None, PUBLIC] = Field(description="null: no budget (public dataset)")
    delta: Annotated[float | None, PUBLIC]
    limited: Annotated[bool, PUBLIC]


class Spend(ResponseModel):
    """The dataset's spend composed by its filter, beside the naive sum of each release's tight
    epsilon (shown to compare: composition saves, or, at one order, may cost more), and the
    filter's working figure (RDP at its order) against its bound."""

    epsilon: Annotated[Epsilon, LEDGER]
    epsilon_text: Annotated[str, LEDGER]
    non_private: Annotated[bool, LEDGER]
    composition: Annotated[str, LEDGER]
    naive_sum_epsilon: Annotated[Epsilon, LEDGER]
    naive_sum_epsilon_text: Annotated[str, LEDGER]
    saved_by_composition_epsilon: Annotated[float | None, LEDGER] = Field(
        description="how much less the composed spend is than the naive sum (0 when it is more)")
    composition_cost_epsilon: Annotated[float | None, LEDGER] = Field(
        description="how much more the composed spend is than the naive sum (0 when it is less)")
    composition_note: Annotated[str, LEDGER] = Field(
        description="the comparison in words: composition saves, or costs more, and why; empty "
        "when there is nothing to compare")
    filter_rdp: Annotated[float | None, LEDGER] = Field(
        description="the charged releases' RDP at the filter's order, summed: what admission "
        "compares with its bound (null: no filter, or infinite: non-private)")
    filter_rdp_bound: Annotated[float | None, LEDGER] = Field(
        description="the filter's bound on that sum (null: no filter)")
    figures_note: Annotated[str, LEDGER] = Field(
        description="why a release's headline epsilon (PLD) and the filter's figure differ; empty "
        "without a filter")
    accountant: Annotated[str, LEDGER]


class Remaining(ResponseModel):
    epsilon: Annotated[float | None, LEDGER] = Field(description="null: no budget")


class LedgerEntryView(ResponseModel):
    """One ledger entry: a job's or a statistics release's mechanism, what it charges, and
    its epsilon."""

    id: Annotated[int, LEDGER]
    job_id: Annotated[int | None, LEDGER] = Field(
        description="the training job charged (null: a statistics release)")
    statistics_release_id: Annotated[int | None, LEDGER] = Field(
        description="the statistics release charged (null: a job)")
    release: ReleaseRef = Field(description="what the spend paid for, in words and by link")
    components: Annotated[list[float] | None, LEDGER] = Field(
        description="a statistics release's noise multipliers, one per noisy vector (null: a job)")
    status: Annotated[EntryStatus | None, LEDGER]
    mechanism: Annotated[str, LEDGER]
    non_private: Annotated[bool, LEDGER]
    noise_multiplier: Annotated[float, LEDGER]
    sample_rate: Annotated[float, LEDGER]
    steps: Annotated[int, LEDGER]
    committed_steps: Annotated[int | None, LEDGER]
    charged_steps: Annotated[int, LEDGER]
    remainder_released: Annotated[bool, LEDGER]
    clip_norm: Annotated[float, LEDGER]
    delta: Annotated[float, LEDGER]
    accountant: Annotated[str, LEDGER]
    epsilon: EpsilonByAccountant
    epsilon_text: Annotated[str, LEDGER]
    filter_rdp: Annotated[float | None, LEDGER] = Field(
        description="the filter's working figure: the charged part as RDP at the filter's order, "
        "what admission adds up (null: no filter, nothing charged, or non-private)")
    search: SearchCharge | None = Field(
        default=None, description="a hyper-parameter search's distribution of runs (its steps "
        "is 1: the search is charged whole); null: any other release")
    created_at: Annotated[ReportDatetime, LEDGER]
    # null (like status) for an entry with no ledger record
    updated_at: Annotated[ReportDatetime | None, LEDGER]


class TimelinePointView(ResponseModel):
    """The dataset's spend right after one more charged entry (null: infinite)."""

    entry_id: Annotated[int, LEDGER]
    job_id: Annotated[int | None, LEDGER]
    statistics_release_id: Annotated[int | None, LEDGER]
    release: ReleaseRef
    at: Annotated[ReportDatetime, LEDGER]
    entry_epsilon: Annotated[Epsilon, LEDGER]
    composed_epsilon: Annotated[Epsilon, LEDGER]
    naive_epsilon: Annotated[Epsilon, LEDGER]
    non_private: Annotated[bool, LEDGER]
    composed_epsilon_text: Annotated[str, LEDGER]


class ReportError(ResponseModel):
    """An audit's error (``ErrorOut``'s fields, read by name)."""

    code: Annotated[str | None, OPERATIONAL_AUDITED]
    message: Annotated[str | None, OPERATIONAL_AUDITED]


class AuditSummary(AuditOut):
    """An audit as the dataset report lists it: ``AuditOut``, with the reports' timestamps."""

    # ErrorOut's fields by name (it reads them from a job's columns): a report read back from
    # its JSON validates.
    error: ReportError | None  # type: ignore[assignment]
    created_at: Annotated[ReportDatetime, PUBLIC]
    started_at: Annotated[ReportDatetime | None, OPERATIONAL]
    finished_at: Annotated[ReportDatetime | None, OPERATIONAL]


class StatisticsReleaseSummary(ResponseModel):
    """A statistics release as the dataset report lists it, beside the training jobs."""

    id: Annotated[int, PUBLIC]
    href: Annotated[str, PUBLIC] = Field(description="the release, with its answers")
    created_at: Annotated[ReportDatetime, PUBLIC]
    mechanism: Annotated[str, PUBLIC]
    target_epsilon: Annotated[float, PUBLIC]
    delta: Annotated[float | None, PUBLIC] = Field(description="null: pure epsilon-DP (Laplace)")
    epsilon: Annotated[float | None, LEDGER] = Field(
        description="the release's own epsilon (null: no entry)")
    epsilon_text: Annotated[str, LEDGER]
    rows: Annotated[int, ROWS]
    queries: Annotated[list[str], PUBLIC] = Field(
        description="each query in words, e.g. 'mean of num_sessions by sex'")
    cells: Annotated[int, ROWS]
    ledger_entry_id: Annotated[int | None, LEDGER]


class DatasetPrivacyReport(ResponseModel):
    """A dataset's budget, composed spend (RDP) with the naive sum, what remains, every ledger
    entry, the spend after each, its statistics releases, and the privacy audits of its
    jobs."""

    dataset_id: Annotated[int, PUBLIC]
    dataset_name: Annotated[str, PUBLIC]
    public: Annotated[bool, PUBLIC]
    privacy_unit: Annotated[str, PUBLIC]
    rows_erased_at: Annotated[Erased, PUBLIC]
    erasure: Annotated[str | None, PUBLIC] = Field(
        description="that the rows were erased, and when; the ledger and the DP releases remain "
        "(null: they were not)")
    terms: PrivacyTerms
    budget: Budget
    spent: Spend
    remaining: Remaining
    entries: list[LedgerEntryView]
    timeline: list[TimelinePointView]
    statistics_releases: list[StatisticsReleaseSummary] = Field(
        description="DP cohort statistics, charged to the same ledger as the training jobs"
    )
    privacy_audits: list[AuditSummary] = Field(
        description="empirical checks of the accounting (public datasets only; they charge "
        "nothing)"
    )
    patient_budget: PatientBudgetView | None = Field(
        default=None, description="the per-patient budget of the dataset's patient space and "
        "what its next release can use (null: a public dataset)")
