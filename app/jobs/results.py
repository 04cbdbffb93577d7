"""What a finished job stores as its result (``Job.metrics``), typed key by key.

A training job stores its held-out metrics: the evaluation part's one DP histogram release and
every figure computed from it (``worker.evaluation.evaluate``), with the calibration part's DP
Platt record (``worker.calibration.Calibration``), its parts typed in ``app.jobs.held_out``; a
privacy-audit job stores the audit's
results (``worker.privacy_audit.audit.run``). Both leave the service in responses (a model, a
job, its privacy report), so every key is a typed field here and each field has its entry in
the release inventory (its ``Released`` annotation): a key nobody classified cannot be
stored, because ``extra="forbid"`` refuses it where a job is finished (``app.jobs.kinds.check``,
against the model its kind declares), and a stored
object that matches no model here (metrics an old worker computed exactly, before the
evaluation was a DP release) is withheld from responses (null) rather than served unclassified.

Non-private jobs on public datasets store the same shape, with exact counts (``exact: true``).
"""

import logging
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from app.core.plugins import RegisteredModels
from app.jobs.held_out import (
    EVALUATED_NOTES,
    CalibrationRecord,
    GroupMetrics,
    HeldOutBin,
    HeldOutDefinitions,
    HeldOutRelease,
    HeldOutRocPoint,
    HeldOutSubgroup,
    HeldOutThresholds,
    HeldOutWarning,
    Stored,
)
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released, class_note
from app.privacy.releases import Release

logger = logging.getLogger(__name__)

AUDITED = Released(Release.AUDIT)
ROWS = Released(Release.PUBLIC_BY_CONVENTION)
FEDERATION_NOTE = "a federated model's federation, as its clinic's registry shows it"
FEDERATION_TRAINED = Released(Release.DP_TRAINING, note=FEDERATION_NOTE)
FEDERATION_LEDGER = Released(Release.LEDGER, note=FEDERATION_NOTE)
FEDERATION_PUBLIC = Released(Release.PUBLIC_INPUT, note=FEDERATION_NOTE)
CANDIDATE = Released(Release.PUBLIC_INPUT, note="a candidate of the public grid, as the request "
                     "gave it (defaults resolved)")
BEST_NOTE = ("the best run of the search, the one output repeat-and-select releases: which "
             "candidate (selected with its model, charged as the whole search) and its score, the "
             "DP log-loss computed from that run's calibration release alone")
CHOSEN = Released(Release.DP_TRAINING, note=BEST_NOTE)
SCORED = Released(Release.DP_CALIBRATION, note=BEST_NOTE)
BEST = Released(Release.PUBLIC_INPUT, note=BEST_NOTE)
BEST_LEDGER = Released(Release.LEDGER, note=BEST_NOTE)


class SearchCandidateRecord(Stored):
    """One candidate of a search's public grid: the training fields it sets (null: the job's
    ``training``, or, for the learning rate, its optimizer's and model's default)."""

    model: Annotated[str | None, CANDIDATE] = None
    optimizer: Annotated[str | None, CANDIDATE] = None
    learning_rate: Annotated[float | None, CANDIDATE] = None
    momentum: Annotated[float | None, CANDIDATE] = None
    max_grad_norm: Annotated[float | None, CANDIDATE] = None
    tail_average: Annotated[float | None, CANDIDATE] = None
    hidden_units: Annotated[int | None, CANDIDATE] = None


class SearchRecord(Stored):
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


class FederationRecord(Stored):
    """A federated model's federation (``worker.federated_site``): the model is FedAvg of the
    sites' DP releases, and its guarantee is each site's own charge; the federation's
    statement is the worst site's, for a patient at one site (a patient at several has the
    composition of their sites' charges)."""

    name: Annotated[str, FEDERATION_PUBLIC]
    site: Annotated[str, FEDERATION_PUBLIC] = Field(description="this clinic's site name")
    rounds: Annotated[int, FEDERATION_PUBLIC] = Field(
        description="the rounds the federation planned")
    rounds_run: Annotated[int, FEDERATION_LEDGER] = Field(
        description="the rounds this site ran (and its ledger charged)")
    sites: Annotated[list[str], FEDERATION_PUBLIC] = Field(description="the sites declared")
    federation_epsilon: Annotated[float | None, FEDERATION_LEDGER] = Field(
        description="the worst site's planned epsilon: the federation's statement")
    federation_delta: Annotated[float | None, FEDERATION_LEDGER]
    model_sha256: Annotated[str | None, FEDERATION_TRAINED] = Field(
        default=None, description="the SHA-256 of the global weights this clinic received, "
        "evaluated and registered: the coordinator's report names the same")
    secure_aggregation: Annotated[bool, FEDERATION_PUBLIC] = Field(
        default=False, description="every round this clinic ran was summed under secure "
        "aggregation (SecAgg+): the coordinator never saw this clinic's update")


class HeldOutEvaluation(GroupMetrics):
    """A training job's held-out metrics: one DP release on the evaluation part, every figure
    post-processing of it, and the calibration record."""

    model_config = ConfigDict(json_schema_extra=class_note(
        "the evaluation part's one noisy histogram release and what is computed from it alone; "
        "exact only on a public dataset trained non-privately"))

    split: Annotated[str, PUBLIC]
    exact: Annotated[bool, LEDGER]
    release: HeldOutRelease
    reliability: list[HeldOutBin]
    roc_curve: list[HeldOutRocPoint]
    band_thresholds: HeldOutThresholds
    subgroups: list[HeldOutSubgroup]
    ci_method: Annotated[str, LEDGER]
    ci_level: Annotated[float, PUBLIC]
    notes: Annotated[list[str], EVALUATED_NOTES]
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


class AuditSettings(Stored):
    """The audited mechanism's settings, and the rows it trained on."""

    model: Annotated[str, PUBLIC]
    hidden_units: Annotated[int, PUBLIC]
    noise_multiplier: Annotated[float, LEDGER]
    sample_rate: Annotated[float, LEDGER]
    steps: Annotated[int, LEDGER]
    epochs: Annotated[int, PUBLIC]
    batch_size: Annotated[int, PUBLIC]
    max_grad_norm: Annotated[float, LEDGER]
    optimizer: Annotated[str, PUBLIC]
    learning_rate: Annotated[float, PUBLIC]
    momentum: Annotated[float, PUBLIC]
    tail_average: Annotated[float, PUBLIC]
    training_rows: Annotated[int, ROWS]


class AuditResults(Stored):
    """A privacy-audit job's results, on public synthetic data only."""

    accounted_epsilon: Annotated[float | None, LEDGER]
    non_private: Annotated[bool, LEDGER]
    accountant: Annotated[str, LEDGER]
    delta: Annotated[float, LEDGER]
    audited_epsilon: Annotated[float | None, AUDITED]
    audited_by: Annotated[str, AUDITED]
    confidence: Annotated[float, PUBLIC]
    alarm: Annotated[bool, AUDITED]
    canaries: Annotated[int, PUBLIC]
    one_run: Annotated[dict[str, Any], AUDITED] = Field(
        description="each one-run audit's bound and counts")
    membership: Annotated[dict[str, Any] | None, AUDITED] = Field(
        description="the membership attacks' results")
    settings: AuditSettings
    seconds: Annotated[dict[str, float], OPERATIONAL] = Field(
        description="seconds per audit phase, and in total")
    audited_job_id: Annotated[int | None, PUBLIC]


class MonitoringResults(Stored):
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


class ComparisonResults(Stored):
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
SERVED_RESULTS = RegisteredModels("a job's stored result")
"""The result models a job view serves: the registered kinds' (``app.jobs.kinds``)."""
ServedResults = Annotated[Any, SERVED_RESULTS, WrapValidator(_typed_or_withheld)]
"""A job's stored result as a response field: the model of a kind the job view serves (held-out
metrics, an audit's results), null when it has none or it matches none. ``Any`` to the type
checker: the models are the registry's, known when the kinds load (and FastAPI would list a
base class named here as a component of its own)."""
