"""Request and response bodies of monitoring runs (``/v1/models/{id}/monitoring-runs``).

Every figure of a run is post-processing of two DP releases: the run's own (on the follow-up,
charged to its ledger) and the training-time ones (the model's DP evaluation, and the reference
statistics release of the training dataset's features); ``app.privacy.inventory_api`` names
each field.
"""

from datetime import date
from typing import Any

from pydantic import Field

from app.core.schemas import (
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.jobs.models import JobStatus
from app.jobs.results import HeldOutBin
from app.jobs.schemas import ErrorOut
from app.statistics.schemas import MIN_EPSILON as MIN_STATISTICS_EPSILON

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


class RunPrivacyOut(ResponseModel):
    target_epsilon: float
    delta: float | None = Field(description="null: a public follow-up (exact counts)")
    noise_multiplier: float = Field(description="noise std over the release's L2 "
                                    "sensitivity (0: exact counts of a public follow-up)")
    l2_sensitivity: float | None = Field(description="sqrt(1 + groupings + features): one "
                                         "record is one cell of each histogram; "
                                         "sqrt(features) on an unlabelled follow-up, which "
                                         "releases only those (null: queued)")


class PeriodOut(ResponseModel):
    start: date
    end: date


class FeatureDriftOut(ResponseModel):
    name: str
    psi: float | None = Field(description="population stability index of the follow-up's "
                              "noisy histogram against the reference's, on public bins")
    psi_ci: list[float] | None
    wasserstein: float | None = Field(description="Wasserstein-1 distance, feature units")
    wasserstein_ci: list[float] | None
    verdict: str = Field(description="drift | no_drift | inconclusive (the noise of both "
                         "releases hides the answer)")
    bins: list[str] = Field(description="the public bins (from the declared bounds)")
    reference: list[float] | None = Field(description="the reference's noisy proportions")
    follow_up: list[float] = Field(description="the follow-up's noisy proportions")
    notes: list[str] = Field(default_factory=list, description="why a distance is withheld "
                             "(the release's noise alone would make it too large to quote)")


class MonitoringRunOut(ResponseModel):
    id: int
    model_id: int
    dataset_id: int
    job_id: int
    status: JobStatus
    period: PeriodOut | None = Field(description="the follow-up's declared period")
    privacy: RunPrivacyOut
    reference_release_id: int | None = Field(
        description="the statistics release of the training dataset's features that data "
        "drift is measured against (null: none could be made; no data drift then)")
    performance: dict[str, Any] | None = Field(
        description="the DP evaluation on the follow-up (the training-time evaluation's "
        "metrics: roc_auc, roc_auc_ci, brier, bands, subgroups, ...) and its drift against "
        "the training-time evaluation (change, change_ci, verdict per metric); null: queued, "
        "or an unlabelled follow-up (no outcomes, see notes)")
    roc_auc: float | None = Field(description="the follow-up's ROC-AUC (noisy)")
    roc_auc_ci: list[float] | None
    features: list[FeatureDriftOut] = Field(description="per feature, sorted by PSI")
    fairness: dict[str, Any] | None = Field(
        description="gaps between subgroups (each group against the largest of its "
        "grouping), on the follow-up and at training time, with intervals")
    notes: list[str]
    error: ErrorOut | None
    created_at: UtcDatetime
    finished_at: UtcDatetime | None


class MonitoringTimeline(ResponseModel):
    model_id: int
    outcome: str = Field(description="the model's outcome label")
    runs: list[MonitoringRunOut] = Field(description="oldest first: one point per run")
    training_reliability: list[HeldOutBin] | None = Field(
        default=None, description="the model's training-time reliability bins (its DP "
        "evaluation release, as ``GET /v1/models/{id}`` serves them), which each run's "
        "performance.reliability is read against (null: none stored)")
