"""The job histograms, fed by the worker as it works: queue wait at each claim, training
throughput at each training job that succeeds.

Why histograms, observed where the work happens: a windowed gauge with a ``quantile`` label
(what these were) is a summary in disguise that ``promtool check metrics`` refuses, cannot be
aggregated across workers and cannot be ``rate()``d. Cumulative histograms can be summed over
every worker and API process and give any quantile over any window
(``histogram_quantile(0.9, sum by (le) (rate(dpcrisis_job_queue_wait_seconds_bucket[1h])))``).

The histograms live in one registry per process, ``WORKER_REGISTRY``: the API's ``/metrics``
includes it (an embedded worker feeds it there; an API without one shows zero counts), and a
worker running as its own process serves it with ``serve_worker_metrics``
(``dpcrisis worker --metrics-port``). Values are operational only: waits and rates, no ids.
"""

from collections.abc import Iterable
from datetime import datetime
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics
from prometheus_client.exposition import start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

WORKER_REGISTRY = CollectorRegistry(auto_describe=True)
"""This process's job histograms (fed by whichever worker runs in it)."""

QUEUE_WAIT_BUCKETS = (0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0,
                      4 * 3600.0, 24 * 3600.0)
"""Seconds from submission to claim: an idle worker claims within its poll (about 1 s); a busy
queue waits for whole jobs (minutes to hours)."""
THROUGHPUT_BUCKETS = (1e2, 3e2, 1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6, 3e6, 1e7)
"""Expected training samples per second: thousands on one CPU core, up to millions on a GPU."""

QUEUE_WAIT = Histogram(
    "dpcrisis_job_queue_wait_seconds",
    "Seconds from a job's submission to its claim by a worker (started_at - created_at), "
    "observed by the worker that claimed it.",
    buckets=QUEUE_WAIT_BUCKETS,
    registry=WORKER_REGISTRY,
)
TRAINING_THROUGHPUT = Histogram(
    "dpcrisis_training_samples_per_second",
    "Expected training samples (steps * sample rate * training rows, Poisson sampling) per "
    "wall-clock second of a training job that succeeded, from the start of its task to its "
    "model stored (evaluation included), observed by the worker that ran it.",
    buckets=THROUGHPUT_BUCKETS,
    registry=WORKER_REGISTRY,
)


def observe_claim(*, created_at: datetime, started_at: datetime | None) -> None:
    """A worker claimed a job: how long it waited in the queue (never negative)."""
    if started_at is not None:
        QUEUE_WAIT.observe(max((started_at - created_at).total_seconds(), 0.0))


def observe_training(*, steps: int, sample_rate: float, training_rows: int,
                     seconds: float) -> None:
    """A training job succeeded after ``seconds`` of its task: its expected samples per second.

    Args:
        steps: DP-SGD steps run (all of them: the job succeeded).
        sample_rate: the Poisson sampling rate q, in (0, 1].
        training_rows: rows of the training part (public: the row count is).
        seconds: wall-clock seconds from the start of the task to the model stored.
    """
    if seconds > 0:
        TRAINING_THROUGHPUT.observe(steps * sample_rate * training_rows / seconds)


class WorkerHistograms(Collector):
    """The process's job histograms, as a collector an app's own registry can include."""

    def collect(self) -> Iterable[Metric]:
        return WORKER_REGISTRY.collect()


def serve_worker_metrics(port: int, host: str = "127.0.0.1") -> WSGIServer:
    """Serve this process's job histograms at ``http://host:port/metrics`` (a daemon thread);
    returns the server (``shutdown()`` stops it).

    For a worker running as its own process: the histograms it feeds are in its memory, not
    the API's. The page has no key: bind it to an address only the scraper reaches.
    """
    disable_created_metrics()  # no ``_created`` series (see app.observability.metrics)
    server, _thread = start_http_server(port, addr=host, registry=WORKER_REGISTRY)
    return server
