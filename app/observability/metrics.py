"""The Prometheus ``GET /metrics`` endpoint and the collectors behind it.

Job counts and budgets are read from the database at scrape time, so those numbers are the same
whichever API process Prometheus scrapes; the job histograms are the worker's own:

- ``dpcrisis_jobs{status}``: jobs by status, one GROUP BY query; every status is always present.
- ``dpcrisis_dataset_epsilon_spent{dataset_id}`` / ``..._remaining{dataset_id}``: composed (RDP)
  spend at the budget delta, exactly the privacy report's ``spent.epsilon``; ``remaining`` is
  only exposed for datasets with a budget. Labels are dataset ids only (no names).
- ``dpcrisis_job_queue_wait_seconds`` and ``dpcrisis_training_samples_per_second``:
  histograms the worker feeds as it claims and finishes jobs (``app.observability.job_metrics``,
  the process's own registry, included here).
- ``dpcrisis_served_band_total{model_id, band}`` and ``dpcrisis_served_score{model_id}``: the
  bands and probabilities this process has served (``app.observability.served_scores``).
- ``dpcrisis_metrics_database_up``: 0 when the scrape could not read the database (the other
  database-backed series are then absent rather than stale).

HTTP series come from ``app.observability.middleware``. No patient feature, request body or
raw path appears in any label or value.

The page passes ``promtool check metrics``: only summaries have a ``quantile`` label (there are
none), and no ``_created`` series is exposed (``disable_created_metrics``: a per-series
creation time is noise in the 0.0.4 text format, where it reads as a gauge of its own).
"""

import logging
import math
from collections.abc import Iterable, Iterator

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.auth.dependencies import require_roles
from app.core.database import get_database
from app.datasets.models import Dataset
from app.jobs import models as job_models
from app.jobs.models import Job
from app.ledger import spend as ledger_spend
from app.observability.job_metrics import WorkerHistograms
from app.observability.middleware import HttpMetrics, MetricsMiddleware
from app.observability.served_scores import SERVED

logger = logging.getLogger(__name__)

JOB_STATUSES = (
    job_models.QUEUED,
    job_models.RUNNING,
    job_models.SUCCEEDED,
    job_models.FAILED,
    job_models.CANCELLED,
)


def jobs_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.status, func.count()).group_by(Job.status))
    counts: dict[str, int] = dict.fromkeys(JOB_STATUSES, 0)
    counts.update({status: count for status, count in rows})
    return counts


def _finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))


class DatabaseCollector(Collector):
    """Reads job and ledger state on every scrape (one short read-only session)."""

    def collect(self) -> Iterable[Metric]:
        try:
            with get_database().session_scope() as session:
                metrics = list(self._collect(session))
        except SQLAlchemyError:
            logger.exception("metrics scrape could not read the database")
            metrics = []
            up = 0
        else:
            up = 1
        yield GaugeMetricFamily(
            "dpcrisis_metrics_database_up",
            "1 if this scrape read the database, 0 if it failed.",
            value=up,
        )
        yield from metrics

    def _collect(self, session: Session) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("dpcrisis_jobs", "Jobs by status.", labels=["status"])
        for status, count in sorted(jobs_by_status(session).items()):
            jobs.add_metric([status], count)
        yield jobs

        spent = GaugeMetricFamily(
            "dpcrisis_dataset_epsilon_spent",
            "Composed (RDP) epsilon spent on the dataset at its budget delta.",
            labels=["dataset_id"],
        )
        remaining = GaugeMetricFamily(
            "dpcrisis_dataset_epsilon_remaining",
            "Epsilon left in the dataset's budget (datasets with a budget only).",
            labels=["dataset_id"],
        )
        for dataset in session.scalars(select(Dataset).order_by(Dataset.id)):
            spend = ledger_spend.dataset_spend(session=session, dataset=dataset)
            label = [str(dataset.id)]
            # A non-private job composes to +Inf; the text format carries it as "+Inf".
            if not math.isnan(spend.composed_epsilon):
                spent.add_metric(label, spend.composed_epsilon)
            if spend.remaining_epsilon is not None and _finite(spend.remaining_epsilon):
                remaining.add_metric(label, spend.remaining_epsilon)
        yield spent
        yield remaining


router = APIRouter(include_in_schema=False)


# A Prometheus scrape job sends a privacy officer's key (``authorization: {credentials: ...}``):
# read-only, and the figures are operational (no ids, no patient data).
@router.get("/metrics", dependencies=[require_roles("privacy_officer")])
def metrics(request: Request) -> Response:
    """Prometheus text exposition format 0.0.4."""
    registry: CollectorRegistry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)


def install_metrics(app: FastAPI) -> None:
    """Give ``app`` its own registry, the HTTP middleware and ``GET /metrics`` (not in OpenAPI).

    A registry per app (not the global one) lets tests build many apps in one process.
    """
    disable_created_metrics()  # process-wide: no ``_created`` series anywhere (see above)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    registry.register(WorkerHistograms())
    registry.register(SERVED)
    app.state.metrics_registry = registry
    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))
    app.include_router(router)
