"""Structured logs: one JSON object per line, tagged with the request or job being handled.

Log shippers (Loki, CloudWatch, Elasticsearch) index JSON lines without a parsing rule, and the
``request_id`` / ``job_id`` fields let an operator follow one request or one job across the API
and many worker processes. Both ids live in context variables, so every record emitted while a
request (or job) is handled carries them, whichever module logs it.

No record carries a request body: patient features sent to the risk endpoints must never reach a
log (docs/privacy.md, "Release inventory"). Nothing here logs bodies, and access lines
name only the method, path and status.

Nor a query string's values: a caller may put a key in the URL (``?api_key=dpk_...``), and
uvicorn's access line quotes the whole URL. Every record passes ``redact_query_strings`` on its
way out, whichever logger wrote it: ``/v1/jobs?api_key=dpk_x&limit=5`` is logged as
``/v1/jobs?api_key=***&limit=***`` (names kept, every value hidden).
"""

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

request_id: ContextVar[str | None] = ContextVar("dpcrisis_request_id", default=None)
job_id: ContextVar[int | None] = ContextVar("dpcrisis_job_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "***"
_QUERY = re.compile(r"\?([^\s\"'#<>]+)")  # a query string: from "?" to a space, quote or "#"


def _redact_query(match: re.Match[str]) -> str:
    parts = [name + "=" + REDACTED if sep else REDACTED
             for name, sep, _ in (part.partition("=") for part in match[1].split("&"))]
    return "?" + "&".join(parts)


def redact_query_strings(text: str) -> str:
    """``text`` with every query string's values replaced by ``***`` (parameter names kept)."""
    return _QUERY.sub(_redact_query, text) if "?" in text else text


class RedactFilter(logging.Filter):
    """Hide query-string values in every record's message (uvicorn's access line included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_query_strings(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class TextFormatter(logging.Formatter):
    """The classic line (``TEXT_FORMAT``), its tracebacks redacted like messages."""

    def formatException(self, ei: Any) -> str:
        return redact_query_strings(super().formatException(ei))


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
            entry["exc_info"] = redact_query_strings(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


def resolved_format(log_format: str) -> str:
    """``auto``: text for a person at a terminal, JSON for a log shipper (anything else)."""
    if log_format != "auto":
        return log_format
    return "text" if sys.stderr.isatty() else "json"


def configure_logging(log_format: str = "json", level: int = logging.INFO) -> None:
    """Route every logger (uvicorn's included) through one stderr handler in ``log_format``
    (``json``, ``text`` or ``auto``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter())  # no query-string value (a key in a URL) in any line
    json_lines = resolved_format(log_format) == "json"
    formatter = JsonFormatter() if json_lines else TextFormatter(TEXT_FORMAT)
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
