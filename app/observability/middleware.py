"""ASGI middleware timing every HTTP request, labelled by route *template*, never raw path.

Labels are ``/v1/jobs/{job_id}``, not ``/v1/jobs/17``: no ids, query strings or request bodies
reach a label, so neither patient data nor unbounded cardinality can leak into the metrics.
A request that matched no route is labelled ``UNMATCHED_ROUTE``.
"""

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED_ROUTE = "<unmatched>"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds. Fine around the scoring goal of 10 ms (1, 2.5, 5, 10, 25, 50 ms), so the share of
requests within it is a bucket ratio, not an interpolation; then up to the slow uploads."""


class HttpMetrics:
    """The two HTTP series, registered on one (per-app) registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "dpcrisis_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template and method "
            "(scoring latency is route=\"/v1/risk\").",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            "dpcrisis_http_errors",
            "HTTP responses with status >= 400, by route template, method and status code.",
            ["route", "method", "status"],
            registry=registry,
        )


def route_template(scope: Scope) -> str:
    """The matched route's path template (FastAPI sets ``scope["route"]`` when it routes)."""
    route: Any = scope.get("route")
    path = getattr(route, "path_format", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


class MetricsMiddleware:
    """Observe duration and error status of each HTTP request; other scopes pass through."""

    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # if the app raises before starting a response, the server sends a 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route, method = route_template(scope), scope["method"]
            self.metrics.duration.labels(route=route, method=method).observe(
                time.perf_counter() - start
            )
            if status >= 400:
                self.metrics.errors.labels(route=route, method=method, status=str(status)).inc()
