"""The Prometheus ``GET /metrics`` endpoint and the database-backed collector behind it.

Everything about jobs and budgets is read from the database at scrape time, so the numbers are
the same whichever API process (or none, if the worker runs elsewhere) Prometheus scrapes:

- ``dpcrisis_jobs{status}``: jobs by status, one GROUP BY query; every status is always present.
- ``dpcrisis_dataset_epsilon_spent{dataset_id}`` / ``..._remaining{dataset_id}``: composed (RDP)
  spend at the budget delta, exactly the privacy report's ``spent.epsilon``; ``remaining`` is
  only exposed for datasets with a budget. Labels are dataset ids only (no names).
- ``dpcrisis_job_queue_wait_seconds{quantile}`` and ``..._last``: gauges over the
  ``WINDOW`` most recently started jobs (``started_at - created_at``). The API does not see
  jobs start, so this is a windowed snapshot, not a cumulative histogram: don't ``rate()`` it.
- ``dpcrisis_training_samples_per_second{quantile}`` and ``..._last``: over the ``WINDOW`` most
  recently succeeded jobs, expected samples (``steps * sample_rate * n_train``, Poisson
  sampling) divided by ``finished_at - started_at``. That wall time includes evaluation and the
  commit, so it slightly understates raw DP-SGD throughput.
- ``dpcrisis_metrics_database_up``: 0 when the scrape could not read the database (the other
  database-backed series are then absent rather than stale).

HTTP series come from ``app.observability.middleware``. No patient feature, request body or
raw path appears in any label or value.
"""

import logging
import math
from collections.abc import Iterable, Iterator, Sequence

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
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
from app.observability.middleware import HttpMetrics, MetricsMiddleware

logger = logging.getLogger(__name__)

WINDOW = 1000
"""How many recent jobs the queue-wait and throughput gauges summarise."""
QUANTILES = (0.5, 0.9, 0.99)
JOB_STATUSES = (
    job_models.QUEUED,
    job_models.RUNNING,
    job_models.SUCCEEDED,
    job_models.FAILED,
    job_models.CANCELLED,
)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of an ascending, non-empty sequence."""
    rank = max(math.ceil(q * len(sorted_values)), 1)
    return sorted_values[rank - 1]


def _windowed(name: str, doc: str, values: list[float]) -> Iterator[Metric]:
    """``name{quantile}`` and ``name_last`` gauges for values listed newest first."""
    if not values:
        return
    ordered = sorted(values)
    summary = GaugeMetricFamily(name, f"{doc} Quantiles over the last {WINDOW} jobs.",
                                labels=["quantile"])
    for q in QUANTILES:
        summary.add_metric([str(q)], quantile(ordered, q))
    yield summary
    yield GaugeMetricFamily(f"{name}_last", f"{doc} Most recent job.", value=values[0])


def jobs_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.status, func.count()).group_by(Job.status))
    counts = dict.fromkeys(JOB_STATUSES, 0)
    counts.update({status: count for status, count in rows})
    return counts


def queue_waits(session: Session) -> list[float]:
    """Seconds from submission to start of the most recently started jobs, newest first."""
    stmt = (
        select(Job.created_at, Job.started_at)
        .where(Job.started_at.is_not(None))
        .order_by(Job.started_at.desc(), Job.id.desc())
        .limit(WINDOW)
    )
    rows = session.execute(stmt)
    return [max((started - created).total_seconds(), 0.0) for created, started in rows]


def training_throughputs(session: Session) -> list[float]:
    """Expected training samples per wall-clock second of recent succeeded jobs, newest first."""
    stmt = (
        select(Job.steps, Job.sample_rate, Dataset.n_train, Job.started_at, Job.finished_at)
        .join(Dataset, Dataset.id == Job.dataset_id)
        .where(Job.status == job_models.SUCCEEDED, Job.kind == job_models.TRAIN,
               Job.started_at.is_not(None), Job.finished_at.is_not(None))
        .order_by(Job.finished_at.desc(), Job.id.desc())
        .limit(WINDOW)
    )
    rates = []
    for steps, sample_rate, n_train, started, finished in session.execute(stmt):
        seconds = (finished - started).total_seconds()
        if seconds > 0:
            rates.append(steps * sample_rate * n_train / seconds)
    return rates


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

        yield from _windowed(
            "dpcrisis_job_queue_wait_seconds",
            "Seconds from submission to start (started_at - created_at).",
            queue_waits(session),
        )
        yield from _windowed(
            "dpcrisis_training_samples_per_second",
            "Expected training samples per second, start to finish of a succeeded job.",
            training_throughputs(session),
        )


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
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    app.state.metrics_registry = registry
    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))
    app.include_router(router)
