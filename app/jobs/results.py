"""What a finished job stores as its result (``Job.metrics``), typed key by key.

A training job stores its held-out metrics: the evaluation part's one DP histogram release and
every figure computed from it (``worker.evaluation.evaluate``), with the calibration part's DP
Platt record (``worker.calibration.Calibration``); a privacy-audit job stores the audit's
results (``worker.privacy_audit.audit.run``). Both leave the service in responses (a model, a
job, its privacy report), so every key is a typed field here and each field has its entry in
the release inventory (``app.privacy.inventory_api``): a key nobody classified cannot be
stored, because ``extra="forbid"`` refuses it where a job is finished (``check``), and a stored
object that matches no model here (metrics an old worker computed exactly, before the
evaluation was a DP release) is withheld from responses (null) rather than served unclassified.

Non-private jobs on public datasets store the same shape, with exact counts (``exact: true``).
"""

import logging
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from app.jobs.models import COMPARISON, FEDERATED, MONITORING, PRIVACY_AUDIT, TRAIN
from app.privacy.annotations import Released
from app.privacy.releases import Release

logger = logging.getLogger(__name__)

Interval = Annotated[list[float], Field(min_length=2, max_length=2)] | None
"""[low, high] of a 95% interval over the release (null: not computed or undefined)."""


class _Stored(BaseModel):
    """A stored result object: no key beyond the fields below."""

    model_config = ConfigDict(extra="forbid")


class HeldOutCounts(_Stored):
    """One released histogram: noisy counts per public score bin, by outcome."""

    negatives: list[float]
    positives: list[float]


class HeldOutHistograms(_Stored):
    all: HeldOutCounts
    by_grouping: dict[str, dict[str, HeldOutCounts]] = Field(
        description="grouping -> group label (both from the public schema) -> its histogram")


class HeldOutRelease(_Stored):
    """The mechanism, its parameters and the noisy histograms as released."""

    mechanism: str
    exact: bool = Field(description="noise multiplier 0: exact counts (public datasets only)")
    noise_multiplier: float
    l2_sensitivity: float
    noise_std: float
    bins: list[float] = Field(description="the public bin edges, 0 to 1")
    groupings: dict[str, list[str]] = Field(
        description="grouping -> its group labels (from the public schema)")
    histograms: HeldOutHistograms
    post_processing: str


class HeldOutBandView(_Stored):
    """Rows in a band (``exactly``) or in it and above (``at_or_above``)."""

    rows: float
    positives: float
    share_of_rows: float | None
    share_of_rows_ci: Interval
    precision: float | None
    precision_ci: Interval
    recall: float | None
    recall_ci: Interval


class HeldOutBand(_Stored):
    p_from: float
    p_to: float
    exactly: HeldOutBandView
    at_or_above: HeldOutBandView


class HeldOutBands(_Stored):
    low: HeldOutBand
    medium: HeldOutBand
    high: HeldOutBand


class _GroupMetrics(_Stored):
    """The metrics of the whole evaluation part, and of each subgroup."""

    rows: float = Field(description="noisy count, one decimal")
    positives: float = Field(description="noisy count, one decimal")
    prevalence: float | None
    prevalence_ci: Interval
    roc_auc: float | None
    roc_auc_ci: Interval
    pr_auc: float | None
    pr_auc_ci: Interval
    brier: float | None
    brier_ci: Interval
    brier_baseline: float | None
    bands: HeldOutBands


class HeldOutSubgroup(_GroupMetrics):
    grouping: str
    group: str
    notes: list[str]


class HeldOutBin(_Stored):
    """One public bin of the reliability diagram."""

    p_from: float
    p_to: float
    p_representative: float
    rows: float
    positives: float
    observed_rate: float | None
    observed_ci: Interval


class HeldOutRocPoint(_Stored):
    threshold: float
    fpr: float | None
    tpr: float | None


class HeldOutThresholds(_Stored):
    low_medium: float
    medium_high: float


class HeldOutDefinitions(_Stored):
    """What each figure means (``worker.evaluation_text.DEFINITIONS``)."""

    release: str
    rows: str
    roc_auc: str
    pr_auc: str
    brier: str
    reliability: str
    roc_curve: str
    bands: str
    ci: str
    none: str
    subgroups: str


class CalibrationRecord(_Stored):
    """DP Platt scaling on the calibration part (``worker.calibration.Calibration``)."""

    method: str
    rows: int = Field(description="the calibration part's rows")
    noise_multiplier: float
    slope: float
    intercept: float
    bin_edges_logit: list[float]
    noisy_counts: list[float]
    noisy_positives: list[float]


class HeldOutWarning(_Stored):
    """A held-out part below its size floor at the job's noise (``app.jobs.size_floor``)."""

    release: Literal["calibration", "evaluation"]
    rows: int = Field(description="the part's rows")
    minimum_rows: int = Field(description="its floor at the job's noise (a public rule)")
    released: bool = Field(description="false: nothing was released (the calibration); true: "
                           "released, but mostly noise (the evaluation)")
    message: str


CANDIDATE = Released(Release.PUBLIC_INPUT, note="a candidate of the public grid, as the "
                     "request gave it (defaults resolved)")
BEST_NOTE = ("the best run of the search, the one output repeat-and-select releases: which "
             "candidate (selected with its model, charged as the whole search) and its score, "
             "the DP log-loss computed from that run's calibration release alone")
CHOSEN = Released(Release.DP_TRAINING, note=BEST_NOTE)
SCORED = Released(Release.DP_CALIBRATION, note=BEST_NOTE)
BEST = Released(Release.PUBLIC_INPUT, note=BEST_NOTE)
BEST_LEDGER = Released(Release.LEDGER, note=BEST_NOTE)


class SearchCandidateRecord(_Stored):
    """One candidate of a search's public grid: the training fields it sets (null: the job's
    ``training``, or, for the learning rate, its optimizer's and model's default)."""

    model: Annotated[str | None, CANDIDATE] = None
    optimizer: Annotated[str | None, CANDIDATE] = None
    learning_rate: Annotated[float | None, CANDIDATE] = None
    momentum: Annotated[float | None, CANDIDATE] = None
    max_grad_norm: Annotated[float | None, CANDIDATE] = None
    tail_average: Annotated[float | None, CANDIDATE] = None
    hidden_units: Annotated[int | None, CANDIDATE] = None


class SearchRecord(_Stored):
    """What a hyper-parameter search releases (``worker.search``): its best run alone."""

    chosen_candidate: Annotated[int, CHOSEN] = Field(
        description="the best run's index in search.candidates")
    chosen: SearchCandidateRecord = Field(description="that candidate, as planned")
    score: Annotated[str, BEST] = Field(
        description="what a run's score is (dp_log_loss: the log-loss of its DP Platt map on "
        "its calibration release; lower is better)")
    chosen_score: Annotated[float | None, SCORED] = Field(
        description="the best run's score (null: its release had no bin above the noise)")
    executed_runs: Annotated[int | None, BEST_LEDGER] = Field(
        default=None, description="M: the runs executed whatever K, the number whose best is "
        "kept (hidden); null: a record from before M was planned")
    tail_probability: Annotated[float | None, BEST_LEDGER] = Field(
        default=None, description="P(K > M), covered by tail_delta")
    tail_delta: Annotated[float | None, BEST_LEDGER] = Field(
        default=None, description="(1 + e^epsilon) P(K > M): the part of the model's delta "
        "that covers K > M")
    note: Annotated[str, BEST]


class FederationRecord(_Stored):
    """A federated model's federation (``worker.federated_site``): the model is FedAvg of the
    sites' DP releases, and its guarantee is each site's own charge; the federation's
    statement is the worst site's, for a patient at one site (a patient at several has the
    composition of their sites' charges)."""

    name: str
    site: str = Field(description="this clinic's site name")
    rounds: int = Field(description="the rounds the federation planned")
    rounds_run: int = Field(description="the rounds this site ran (and its ledger charged)")
    sites: list[str] = Field(description="the sites declared")
    federation_epsilon: float | None = Field(
        description="the worst site's planned epsilon: the federation's statement")
    federation_delta: float | None
    model_sha256: str | None = Field(
        default=None, description="the SHA-256 of the global weights this clinic received, "
        "evaluated and registered: the coordinator's report names the same")
    secure_aggregation: bool = Field(
        default=False, description="every round this clinic ran was summed under secure "
        "aggregation (SecAgg+): the coordinator never saw this clinic's update")


class HeldOutEvaluation(_GroupMetrics):
    """A training job's held-out metrics: one DP release on the evaluation part, every figure
    post-processing of it, and the calibration record."""

    split: str
    exact: bool
    release: HeldOutRelease
    reliability: list[HeldOutBin]
    roc_curve: list[HeldOutRocPoint]
    band_thresholds: HeldOutThresholds
    subgroups: list[HeldOutSubgroup]
    ci_method: str
    ci_level: float
    notes: list[str]
    definitions: HeldOutDefinitions
    calibration: CalibrationRecord
    held_out_warnings: list[HeldOutWarning] = Field(
        default_factory=list,
        description="held-out parts below their size floor at the job's noise, in words "
        "(empty: both releases meaningful; absent before the floors existed)")
    search: SearchRecord | None = Field(
        default=None, description="a search job's best run, the one released (null: one run)")
    federation: FederationRecord | None = Field(
        default=None, description="a federated model's federation (null: one site's model)")


class AuditSettings(_Stored):
    """The audited mechanism's settings, and the rows it trained on."""

    model: str
    hidden_units: int
    noise_multiplier: float
    sample_rate: float
    steps: int
    epochs: int
    batch_size: int
    max_grad_norm: float
    optimizer: str
    learning_rate: float
    momentum: float
    tail_average: float
    training_rows: int


class AuditResults(_Stored):
    """A privacy-audit job's results, on public synthetic data only."""

    accounted_epsilon: float | None
    non_private: bool
    accountant: str
    delta: float
    audited_epsilon: float | None
    audited_by: str
    confidence: float
    alarm: bool
    canaries: int
    one_run: dict[str, Any] = Field(description="each one-run audit's bound and counts")
    membership: dict[str, Any] | None = Field(description="the membership attacks' results")
    settings: AuditSettings
    seconds: dict[str, float] = Field(description="seconds per audit phase, and in total")
    audited_job_id: int | None


class MonitoringResults(_Stored):
    """A monitoring run's results (``worker.monitoring.task``): its one release on the
    follow-up and every figure post-processed from it and the training-time releases; served
    by ``GET /v1/monitoring-runs/{id}`` (``app.monitoring.schemas``), classified there."""

    model_id: int
    performance: dict[str, Any] | None = Field(
        description="the follow-up's DP evaluation (null: an unlabelled follow-up, features "
        "only)")
    drift: dict[str, Any] | None = Field(description="performance drift against the "
                                         "training-time evaluation (null: it has no release)")
    features: list[dict[str, Any]] = Field(description="per feature: PSI, Wasserstein, verdict")
    fairness: dict[str, Any] | None = Field(
        description="subgroup gaps, follow-up and training time (null: unlabelled follow-up)")
    feature_release: dict[str, Any] = Field(description="the features' noisy histograms")
    l2_sensitivity: float
    notes: list[str]


class ComparisonResults(_Stored):
    """A champion/challenger comparison's results (``worker.monitoring.comparison``): its one
    release on the follow-up's evaluation part and what is post-processed from it; served by
    ``GET /v1/comparisons/{id}`` (``app.monitoring.comparison_schemas``), classified there."""

    champion: dict[str, Any] = Field(description="the champion's DP evaluation")
    challenger: dict[str, Any] = Field(description="the challenger's, from the same release")
    difference: dict[str, Any] = Field(description="challenger minus champion, with intervals")
    l2_sensitivity: float
    notes: list[str]


def _typed_or_withheld(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Serve a stored result only as its typed model; null when it matches none."""
    if value is None:
        return None
    try:
        return handler(value)
    except ValidationError:
        logger.warning("a stored job result matches no typed result model: withheld")
        return None


ServedEvaluation = Annotated[HeldOutEvaluation | None, WrapValidator(_typed_or_withheld)]
"""A stored held-out evaluation as a response field (null: none, or an untyped legacy one)."""
ServedResults = Annotated[HeldOutEvaluation | AuditResults | None,
                          WrapValidator(_typed_or_withheld)]
"""A job's stored result as a response field: held-out metrics or an audit's results."""

RESULT_MODELS: dict[str, type[_Stored]] = {TRAIN: HeldOutEvaluation, PRIVACY_AUDIT: AuditResults,
                                           MONITORING: MonitoringResults,
                                           COMPARISON: ComparisonResults,
                                           FEDERATED: HeldOutEvaluation}
"""``Job.kind`` -> the model of what it stores."""
_ADAPTERS = {kind: TypeAdapter(model) for kind, model in RESULT_MODELS.items()}


def check(kind: str, results: dict[str, Any]) -> None:
    """Refuse to store a result with a key (or a value) its typed model does not declare.

    Raises:
        ValidationError: a key that is not a field (an unclassified release), a missing one,
            or a value of the wrong type.
        KeyError: a job kind without a result model.
    """
    _ADAPTERS[kind].validate_python(results)
