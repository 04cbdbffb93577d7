"""Structured logs: one JSON object per line, tagged with the request or job being handled.

Log shippers (Loki, CloudWatch, Elasticsearch) index JSON lines without a parsing rule, and the
``request_id`` / ``job_id`` fields let an operator follow one request or one job across the API
and many worker processes. Both ids live in context variables, so every record emitted while a
request (or job) is handled carries them, whichever module logs it.

No record carries a request body: patient features sent to the risk endpoints must never reach a
log (DESIGN.md, "What leaves the trust boundary"). Nothing here logs bodies, and access lines
name only the method, path and status.
"""

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

request_id: ContextVar[str | None] = ContextVar("dpcrisis_request_id", default=None)
job_id: ContextVar[int | None] = ContextVar("dpcrisis_job_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ContextFilter(logging.Filter):
    """Copy the current request and job ids onto every record (None outside one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        if not hasattr(record, "job_id"):
            record.job_id = job_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "request_id"?, "job_id"?, "exc_info"?}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ("request_id", "job_id", "worker_id"):
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(log_format: str = "json", level: int = logging.INFO) -> None:
    """Route every logger (uvicorn's included) through one stderr handler in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Alembic announces each of its plugins at INFO on every start; its migrations still log.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)


@contextmanager
def job_context(current_job_id: int) -> Iterator[None]:
    """Tag the records logged while this job runs (in this thread) with its id."""
    token = job_id.set(current_job_id)
    try:
        yield
    finally:
        job_id.reset(token)
