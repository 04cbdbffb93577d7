"""Request and response bodies of retraining from a monitoring run and of champion/challenger
comparisons (``/v1/monitoring-runs/{id}/retrain``, ``/v1/models/{id}/comparisons``).

A comparison's figures are post-processing of its one Gaussian release on the follow-up's
evaluation part (both models' score-bin x outcome histograms, ``worker.monitoring.comparison``:
classified ``DP_EVALUATION``, the mechanism the training-time evaluation uses); its noise and
target are the ledger's. Each response field names its release (``Released``); retraining from
a run answers with a job (``JobOut``, classified with the jobs).
"""

from typing import Annotated, Any

from pydantic import Field

from app.core.schemas import (
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.jobs.models import JobStatus
from app.jobs.schemas import ErrorOut, TaskPayload
from app.monitoring.schemas import MAX_EPSILON
from app.privacy.annotations import LEDGER, OPERATIONAL, PUBLIC, Released
from app.privacy.releases import Release

DP_EVALUATION = Release.DP_EVALUATION


class RetrainPrivacy(RequestModel):
    target_epsilon: PrivacyNumber = Field(
        gt=0, le=MAX_EPSILON, description="the retraining job's target on the follow-up "
        "(default: the model's own job's target)")


@register_ranges
class RetrainCreate(RequestModel):
    privacy: RetrainPrivacy | None = Field(
        default=None, description="null: the model's own job's target epsilon")
    dataset_id: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="a declared union of cohorts (a "
        "dataset with source kind union) that holds the run's follow-up, to retrain on them "
        "together under the per-patient budget; null: the follow-up alone")


class ComparisonPrivacy(RequestModel):
    target_epsilon: PrivacyNumber = Field(
        gt=0, le=MAX_EPSILON, description="the comparison's one release on the follow-up's "
        "evaluation part, at the follow-up's budget delta")


@register_ranges
class ComparisonCreate(RequestModel):
    challenger_id: int = Field(ge=1, le=2**31 - 1, description="the model to compare with "
                               "this one (the champion), of the same declared schema")
    dataset_id: int = Field(ge=1, le=2**31 - 1, description="the follow-up cohort whose "
                            "evaluation part both models are scored on (labelled, their schema)")
    privacy: ComparisonPrivacy


class ComparisonPayload(TaskPayload):
    """A comparison's task payload (``worker.monitoring.comparison``): the two models and the
    notes its submission made (e.g. a challenger trained on another cohort)."""

    champion_id: int
    challenger_id: int
    notes: list[str] = Field(default_factory=list)


class ComparisonOut(ResponseModel):
    id: Annotated[int, PUBLIC] = Field(description="the comparison's job id")
    champion_id: Annotated[int, PUBLIC]
    challenger_id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    status: Annotated[JobStatus, OPERATIONAL]
    target_epsilon: Annotated[float, PUBLIC]
    delta: Annotated[float | None, LEDGER] = Field(
        description="null: a public follow-up (exact counts)")
    noise_multiplier: Annotated[float, LEDGER] = Field(
        description="noise std over the release's L2 sensitivity")
    l2_sensitivity: Annotated[float | None, LEDGER] = Field(
        description="sqrt(2 (1 + groupings)): one record is one cell of each model's "
        "histograms (null: queued)")
    champion: Annotated[dict[str, Any] | None, Released(
        DP_EVALUATION, note="the champion's DP evaluation on the follow-up's evaluation part "
        "(the training-time evaluation's shape: noisy histograms as released, every metric "
        "post-processing)")] = Field(description="the champion's DP evaluation on the "
                                     "follow-up's evaluation part (null: not done)")
    challenger: Annotated[dict[str, Any] | None, Released(
        DP_EVALUATION, note="the challenger's DP evaluation, from the same release")] = Field(
        description="the challenger's, from the same release")
    difference: Annotated[dict[str, Any] | None, Released(
        DP_EVALUATION, note="challenger minus champion per metric with intervals from both "
        "models' noisy histograms of the one release: post-processing of it")] = Field(
        description="challenger minus champion per metric (overall and per subgroup), with "
        "an interval accounting for the release's noise, and a verdict on the harm: better, "
        "worse, no_change or inconclusive")
    verdict: Annotated[str | None, Released(DP_EVALUATION)] = Field(
        description="better | worse | no_change | inconclusive: the challenger's ROC-AUC "
        "against the champion's, beyond the noise (activation stays a person's decision)")
    notes: Annotated[list[str], Released(DP_EVALUATION, Release.PUBLIC_INPUT)]
    error: ErrorOut | None
    created_at: Annotated[UtcDatetime, PUBLIC]
    finished_at: Annotated[UtcDatetime | None, OPERATIONAL]
