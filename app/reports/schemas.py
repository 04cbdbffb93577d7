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


class EpsilonByAccountant(ResponseModel):
    """One mechanism's epsilon at its delta, by each accountant."""

    rdp: Epsilon
    pld: Epsilon = Field(description="the headline PLD accountant's figure; null: infinite")
    prv: Epsilon = Field(deprecated=_PRV_DEPRECATED, description="the same figure as pld")

    _pld = model_validator(mode="before")(_pld_from_prv)


class Accountants(ResponseModel):
    reported: str = Field(description="the accountant whose epsilon the report states")
    composition: str = Field(description="the accountant the ledger composes spend with")


class EpochEpsilon(ResponseModel):
    """Epsilon spent after one finished epoch, as the worker recorded it."""

    epoch: int
    pld: Epsilon = Field(description="the headline PLD accountant's figure; null: infinite")
    prv: Epsilon = Field(deprecated=_PRV_DEPRECATED, description="the same figure as pld")
    rdp: Epsilon

    _pld = model_validator(mode="before")(_pld_from_prv)


class Coverage(ResponseModel):
    """What the guarantee covers and what it does not."""

    covers: list[str]
    does_not_cover: list[str]


class IntendedUse(ResponseModel):
    purpose: str
    users: str
    decision_support_not_diagnosis: bool
    out_of_scope: list[str]


class TrainingData(ResponseModel):
    """Public facts about the training data only: no statistic of the private rows."""

    dataset_id: int
    dataset_name: str
    source: str
    synthetic: bool
    public: bool
    rows: int
    training_rows: int
    holdout_rows: int
    note: str
    rows_erased_at: Erased = None


class HeldOutMetrics(ResponseModel):
    # The worker's held-out metrics as stored with the job, typed key by key
    # (app.jobs.results): the DP evaluation release and what was computed from it, with the
    # calibration record.
    values: ServedResults = Field(description="null until the job has finished")
    note: str = Field(description="how the values were computed (one DP release on the "
                      "evaluation rows; every figure computed from its noisy counts)")


class ModelCard(ResponseModel):
    outcome: str = Field(description="what the model predicts: its schema's outcome label "
                         "(else the outcome column's name), as every text of the card names it")
    intended_use: IntendedUse
    training_data: TrainingData
    metrics: HeldOutMetrics
    caveats: list[str]
    erasure: str | None = Field(
        default=None, description="that the training rows were erased, and when; the model, a "
        "DP release of them, remains in use under its guarantee (null: they were not)")


class PrivacyTerms(ResponseModel):
    """Who is protected against what, and how (``app.privacy.terms``)."""

    neighbouring_relation: str
    parts: str
    filter: str
    filter_order: float | None = Field(description="the Rényi filter's fixed order (null: none)")
    noise_source: str


class JobPrivacyReport(ResponseModel):
    """A job's mechanism, sampling, noise, clipping, steps, delta, epsilon by accountant and
    per epoch, the guarantee in words, and its model card."""

    job_id: int
    dataset_id: int
    dataset_name: str
    status: JobStatus
    privacy_unit: str
    dataset_rows: int
    training_rows: int
    holdout_rows: int
    rows_erased_at: Erased
    mechanism: str
    non_private: bool
    sampling: str
    sample_rate: float
    expected_batch_size: float
    noise_multiplier: float
    clip_norm: float
    clipping: str
    steps: int
    steps_per_epoch: int
    epochs: int
    epochs_completed: int
    delta: float
    target_epsilon: float | None
    epsilon: EpsilonByAccountant = Field(description="the full planned run's epsilon")
    epsilon_text: str = Field(description="the reported epsilon rounded up, or 'infinity'")
    filter_rdp: float | None = Field(
        description="the filter's working figure: the job's charge (charged steps) as RDP at the "
        "dataset filter's order, what admission adds up (null: no filter, nothing charged, or "
        "non-private)")
    accountants: Accountants
    epsilon_spent: float | None
    epsilon_per_epoch: list[EpochEpsilon]
    search: SearchOut | None = Field(
        default=None, description="the job's hyper-parameter search as planned and charged "
        "(null: one run); the run's noise, sample rate and steps above are each run's")
    # The same stored held-out metrics as the model card's (see HeldOutMetrics).
    metrics: ServedResults
    metrics_note: str
    statement: str
    terms: PrivacyTerms
    coverage: Coverage
    model_card: ModelCard


class Budget(ResponseModel):
    epsilon: float | None = Field(description="null: no budget (public dataset)")
    delta: float | None
    limited: bool


class Spend(ResponseModel):
    """The dataset's spend composed by its filter, beside the naive sum of each release's tight
    epsilon (shown to compare: composition saves, or, at one order, may cost more), and the
    filter's working figure (RDP at its order) against its bound."""

    epsilon: Epsilon
    epsilon_text: str
    non_private: bool
    composition: str
    naive_sum_epsilon: Epsilon
    naive_sum_epsilon_text: str
    saved_by_composition_epsilon: float | None = Field(
        description="how much less the composed spend is than the naive sum (0 when it is more)")
    composition_cost_epsilon: float | None = Field(
        description="how much more the composed spend is than the naive sum (0 when it is less)")
    composition_note: str = Field(
        description="the comparison in words: composition saves, or costs more, and why; empty "
        "when there is nothing to compare")
    filter_rdp: float | None = Field(
        description="the charged releases' RDP at the filter's order, summed: what admission "
        "compares with its bound (null: no filter, or infinite: non-private)")
    filter_rdp_bound: float | None = Field(
        description="the filter's bound on that sum (null: no filter)")
    figures_note: str = Field(
        description="why a release's headline epsilon (PLD) and the filter's figure differ; "
        "empty without a filter")
    accountant: str


class Remaining(ResponseModel):
    epsilon: float | None = Field(description="null: no budget")


class LedgerEntryView(ResponseModel):
    """One ledger entry: a job's or a statistics release's mechanism, what it charges, and
    its epsilon."""

    id: int
    job_id: int | None = Field(description="the training job charged (null: a statistics "
                               "release)")
    statistics_release_id: int | None = Field(description="the statistics release charged "
                                              "(null: a job)")
    release: ReleaseRef = Field(description="what the spend paid for, in words and by link")
    components: list[float] | None = Field(description="a statistics release's noise "
                                           "multipliers, one per noisy vector (null: a job)")
    status: EntryStatus | None
    mechanism: str
    non_private: bool
    noise_multiplier: float
    sample_rate: float
    steps: int
    committed_steps: int | None
    charged_steps: int
    remainder_released: bool
    clip_norm: float
    delta: float
    accountant: str
    epsilon: EpsilonByAccountant
    epsilon_text: str
    filter_rdp: float | None = Field(
        description="the filter's working figure: the charged part as RDP at the filter's "
        "order, what admission adds up (null: no filter, nothing charged, or non-private)")
    search: SearchCharge | None = Field(
        default=None, description="a hyper-parameter search's distribution of runs (its steps "
        "is 1: the search is charged whole); null: any other release")
    created_at: ReportDatetime
    updated_at: ReportDatetime | None  # null (like status) for an entry with no ledger record


class TimelinePointView(ResponseModel):
    """The dataset's spend right after one more charged entry (null: infinite)."""

    entry_id: int
    job_id: int | None
    statistics_release_id: int | None
    release: ReleaseRef
    at: ReportDatetime
    entry_epsilon: Epsilon
    composed_epsilon: Epsilon
    naive_epsilon: Epsilon
    non_private: bool
    composed_epsilon_text: str


class ReportError(ResponseModel):
    """An audit's error (``ErrorOut``'s fields, read by name)."""

    code: str | None
    message: str | None


class AuditSummary(AuditOut):
    """An audit as the dataset report lists it: ``AuditOut``, with the reports' timestamps."""

    # ErrorOut's fields by name (it reads them from a job's columns): a report read back from
    # its JSON validates.
    error: ReportError | None  # type: ignore[assignment]
    created_at: ReportDatetime
    started_at: ReportDatetime | None
    finished_at: ReportDatetime | None


class StatisticsReleaseSummary(ResponseModel):
    """A statistics release as the dataset report lists it, beside the training jobs."""

    id: int
    href: str = Field(description="the release, with its answers")
    created_at: ReportDatetime
    mechanism: str
    target_epsilon: float
    delta: float | None = Field(description="null: pure epsilon-DP (Laplace)")
    epsilon: float | None = Field(description="the release's own epsilon (null: no entry)")
    epsilon_text: str
    rows: int
    queries: list[str] = Field(description="each query in words, e.g. 'mean of num_sessions "
                               "by sex'")
    cells: int
    ledger_entry_id: int | None


class DatasetPrivacyReport(ResponseModel):
    """A dataset's budget, composed spend (RDP) with the naive sum, what remains, every ledger
    entry, the spend after each, its statistics releases, and the privacy audits of its
    jobs."""

    dataset_id: int
    dataset_name: str
    public: bool
    privacy_unit: str
    rows_erased_at: Erased
    erasure: str | None = Field(
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


class AuditEpsilons(ResponseModel):
    """The accounted epsilon (an upper bound, rounded up) beside the audited one (a lower
    bound, rounded down)."""

    accounted: Epsilon
    accounted_text: str
    accountant: str
    audited: float | None = Field(description="null until the audit has run")
    audited_text: str | None
    audited_by: str | None
    delta: float
    confidence: float
    non_private: bool


class AttackAUC(ResponseModel):
    loss: float | None
    lira: float | None


class AttackAUCs(ResponseModel):
    """ROC-AUC of each membership attack on each model (null until the audit has run)."""

    dp: AttackAUC
    non_private: AttackAUC


class AuditLinks(ResponseModel):
    audited_job_report: str
    dataset_report: str


class AuditReport(ResponseModel):
    """Per audited job: both epsilons, the one-run audits, the attacks, and where it ran."""

    audit_id: int
    audited_job_id: int
    dataset_id: int
    dataset_name: str
    status: JobStatus
    alarm: bool
    error: ReportError | None
    privacy_unit: str
    epsilon: AuditEpsilons
    # Free-form, as stored: the request as submitted (older audits lack later fields), and
    # the audit worker's results, whose parts differ by auditor and attack; all null until
    # the audit has run. The page reads what it recognises.
    request: dict[str, Any]
    settings: dict[str, Any] | None
    one_run: dict[str, Any] | None
    membership: dict[str, Any] | None
    attack_auc: AttackAUCs
    seconds: dict[str, Any] | None
    ledger: str
    links: AuditLinks
    statement: str
