"""Request and response bodies of monitoring runs (``/v1/models/{id}/monitoring-runs``).

Every figure of a run is post-processing of two DP releases: the run's own (on the follow-up,
charged to its ledger) and the training-time ones (the model's DP evaluation, and the reference
statistics release of the training dataset's features: ``DP_STATISTICS``); the run's own is
classified ``DP_EVALUATION``, the mechanism the training-time evaluation uses, and its noise
and target are the ledger's. Each response field names its release (``Released``).
"""

from datetime import date
from typing import Annotated, Any

from pydantic import Field

from app.core.schemas import (
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.jobs.held_out import HeldOutBin
from app.jobs.models import JobStatus
from app.jobs.schemas import ErrorOut, TaskPayload
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release
from app.statistics.schemas import MIN_EPSILON as MIN_STATISTICS_EPSILON

DRIFT = Released(Release.DP_EVALUATION, Release.DP_STATISTICS)
FOLLOW_UP = Released(Release.DP_EVALUATION)
REFERENCE = Released(Release.DP_STATISTICS)
NOISY_AUC = Released(Release.DP_EVALUATION, Release.PUBLIC_INPUT)
PERFORMANCE = Released(
    Release.DP_EVALUATION, note="the follow-up's DP evaluation (the training-time evaluation's "
    "shape: noisy histograms as released, every metric post-processing of them) and its drift "
    "against the training-time evaluation release (both releases' noise in the intervals)")
FAIRNESS = Released(
    Release.DP_EVALUATION, note="gaps between subgroups of the follow-up's and of the "
    "training-time evaluation releases, with intervals: post-processing of those releases")

MAX_EPSILON = 100.0


class MonitoringPrivacy(RequestModel):
    target_epsilon: PrivacyNumber = Field(
        ge=MIN_STATISTICS_EPSILON, le=MAX_EPSILON, description="the run's one release, at the "
        "follow-up's budget delta; the first run of a model also releases the training "
        "dataset's feature histograms (its reference) at this target, charged to that dataset "
        "as a statistics release: hence the statistics' smallest epsilon")


@register_ranges
class MonitoringRunCreate(RequestModel):
    dataset_id: int = Field(ge=1, le=2**31 - 1, description="the follow-up cohort (the "
                            "model's declared schema; an unlabelled one: data drift only)")
    privacy: MonitoringPrivacy


class MonitoringPayload(TaskPayload):
    """A monitoring run's task payload (``worker.monitoring.task``): the model it monitors and
    the notes its submission made (e.g. why it has no reference release)."""

    model_id: int
    notes: list[str] = Field(default_factory=list)


class RunPrivacyOut(ResponseModel):
    target_epsilon: Annotated[float, PUBLIC]
    delta: Annotated[float | None, LEDGER] = Field(
        description="null: a public follow-up (exact counts)")
    noise_multiplier: Annotated[float, LEDGER] = Field(
        description="noise std over the release's L2 sensitivity (0: exact counts of a public "
        "follow-up)")
    l2_sensitivity: Annotated[float | None, LEDGER] = Field(
        description="sqrt(1 + groupings + features): one record is one cell of each histogram; "
        "sqrt(features) on an unlabelled follow-up, which releases only those (null: queued)")


class PeriodOut(ResponseModel):
    start: Annotated[date, PUBLIC]
    end: Annotated[date, PUBLIC]


class FeatureDriftOut(ResponseModel):
    name: Annotated[str, PUBLIC]
    psi: Annotated[float | None, DRIFT] = Field(
        description="population stability index of the follow-up's noisy histogram against the "
        "reference's, on public bins")
    psi_ci: Annotated[list[float] | None, DRIFT]
    wasserstein: Annotated[float | None, DRIFT] = Field(
        description="Wasserstein-1 distance, feature units")
    wasserstein_ci: Annotated[list[float] | None, DRIFT]
    verdict: Annotated[str, DRIFT] = Field(
        description="drift | no_drift | inconclusive (the noise of both releases hides the answer)")
    bins: Annotated[list[str], PUBLIC] = Field(
        description="the public bins (from the declared bounds)")
    reference: Annotated[list[float] | None, REFERENCE] = Field(
        description="the reference's noisy proportions")
    follow_up: Annotated[list[float], FOLLOW_UP] = Field(
        description="the follow-up's noisy proportions")
    notes: Annotated[list[str], DRIFT] = Field(
        default_factory=list, description="why a distance is withheld (the release's noise alone "
        "would make it too large to quote)")


class MonitoringRunOut(ResponseModel):
    id: Annotated[int, PUBLIC]
    model_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    job_id: Annotated[int, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    period: PeriodOut | None = Field(description="the follow-up's declared period")
    privacy: RunPrivacyOut
    reference_release_id: Annotated[int | None, PUBLIC] = Field(
        description="the statistics release of the training dataset's features that data "
        "drift is measured against (null: none could be made; no data drift then)")
    performance: Annotated[dict[str, Any] | None, PERFORMANCE] = Field(
        description="the DP evaluation on the follow-up (the training-time evaluation's "
        "metrics: roc_auc, roc_auc_ci, brier, bands, subgroups, ...) and its drift against "
        "the training-time evaluation (change, change_ci, verdict per metric); null: queued, "
        "or an unlabelled follow-up (no outcomes, see notes)")
    roc_auc: Annotated[float | None, NOISY_AUC] = Field(
        description="the follow-up's ROC-AUC (noisy)")
    roc_auc_ci: Annotated[list[float] | None, NOISY_AUC]
    features: list[FeatureDriftOut] = Field(description="per feature, sorted by PSI")
    fairness: Annotated[dict[str, Any] | None, FAIRNESS] = Field(
        description="gaps between subgroups (each group against the largest of its "
        "grouping), on the follow-up and at training time, with intervals")
    notes: Annotated[list[str], NOISY_AUC]
    error: ErrorOut | None
    created_at: Annotated[UtcDatetime, PUBLIC]
    finished_at: Annotated[UtcDatetime | None, OPERATIONAL]


class MonitoringTimeline(ResponseModel):
    model_id: Annotated[int, PUBLIC]
    outcome: Annotated[str, PUBLIC] = Field(description="the model's outcome label")
    runs: list[MonitoringRunOut] = Field(description="oldest first: one point per run")
    training_reliability: list[HeldOutBin] | None = Field(
        default=None, description="the model's training-time reliability bins (its DP "
        "evaluation release, as ``GET /v1/models/{id}`` serves them), which each run's "
        "performance.reliability is read against (null: none stored)")
