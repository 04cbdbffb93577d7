"""A monitoring run as served: its row, its job and the results its worker stored."""

from typing import Any

from app.datasets.models import Dataset
from app.jobs.models import Job
from app.jobs.schemas import ErrorOut
from app.monitoring.models import MonitoringRun
from app.monitoring.schemas import (
    FeatureDriftOut,
    MonitoringPayload,
    MonitoringRunOut,
    PeriodOut,
    RunPrivacyOut,
)


def describe(run: MonitoringRun, job: Job, dataset: Dataset) -> MonitoringRunOut:
    results: dict[str, Any] = job.metrics or {}
    performance = results.get("performance")
    notes = list(results.get("notes") or MonitoringPayload.model_validate(job.payload).notes)
    if performance is not None and results.get("drift") is not None:
        performance = {**performance, "drift": results["drift"]}
    period = (None if dataset.follow_up_period_start is None
              or dataset.follow_up_period_end is None
              else PeriodOut(start=dataset.follow_up_period_start,
                             end=dataset.follow_up_period_end))
    return MonitoringRunOut(
        id=run.id, model_id=run.model_id, dataset_id=run.dataset_id, job_id=job.id,
        status=job.status, period=period,
        privacy=RunPrivacyOut(
            target_epsilon=run.target_epsilon, delta=job.delta if job.delta > 0 else None,
            noise_multiplier=job.noise_multiplier,
            l2_sensitivity=results.get("l2_sensitivity")),
        reference_release_id=run.reference_release_id,
        performance=performance,
        roc_auc=None if performance is None else performance.get("roc_auc"),
        roc_auc_ci=None if performance is None else performance.get("roc_auc_ci"),
        features=[FeatureDriftOut.model_validate(f) for f in results.get("features", [])],
        fairness=results.get("fairness"), notes=notes, error=ErrorOut.of(job),
        created_at=run.created_at, finished_at=job.finished_at)
