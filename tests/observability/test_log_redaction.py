"""No query-string value reaches a log line: a key sent as ``?api_key=`` was logged verbatim by
uvicorn's access line. Checked on the records a real uvicorn server writes through the
service's logging set-up (``configure_logging``), in both formats."""

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.database import Database
from app.core.logs import configure_logging, redact_query_strings
from app.main import create_app
from tests.threaded_server import threaded_server

SECRET = "dpk_0123456789ab_" + "S3cr3tS3cr3t" * 3 + "S3cr3tS"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``configure_logging`` replaces the root handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _serve_and_call(db: Database, *paths: str) -> None:
    """A real uvicorn server (the app ``dpcrisis serve`` runs) answering ``paths``."""
    with threaded_server(db, create_app(), log_level="info") as address:
        for path in paths:
            httpx.get(f"http://{address}{path}", timeout=10)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_access_lines_carry_no_query_string_value(
    db: Database, restore_logging: None, capsys: pytest.CaptureFixture[str], log_format: str,
    tmp_path: Path,
) -> None:
    configure_logging(log_format)
    _serve_and_call(db, f"/v1/jobs?api_key={SECRET}&limit=5",
                    f"/v1/datasets?token={SECRET[4:]}", f"/healthz?{SECRET}")
    logged = capsys.readouterr().err
    access = [line for line in logged.splitlines() if "uvicorn.access" in line]
    assert len(access) == 3, logged  # the check would be vacuous without the access lines
    assert "GET /v1/jobs?api_key=***&limit=*** HTTP/1.1" in logged
    assert "/v1/datasets?token=*** " in logged and "/healthz?*** " in logged
    for part in (SECRET, SECRET[4:16], SECRET[17:29], "S3cr3t"):
        assert part not in logged


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_any_logger_and_tracebacks_are_redacted(
    restore_logging: None, capsys: pytest.CaptureFixture[str], log_format: str
) -> None:
    configure_logging(log_format)
    logging.getLogger("httpx").info('HTTP Request: GET http://api/v1/risk?key=%s "200"', SECRET)
    try:
        raise RuntimeError(f"could not fetch /v1/jobs?api_key={SECRET}")
    except RuntimeError:
        logging.getLogger("dpcrisis.test").exception("failed")
    logged = capsys.readouterr().err
    assert "?key=***" in logged and "?api_key=***" in logged and "S3cr3t" not in logged


def test_redaction_keeps_names_and_text_without_a_query() -> None:
    assert redact_query_strings("GET /v1/jobs?limit=5&status=queued") == \
        "GET /v1/jobs?limit=***&status=***"
    assert redact_query_strings("no query here; is it? yes") == "no query here; is it? yes"


def test_auto_log_format_is_text_at_a_terminal_and_json_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.core.logs import resolved_format

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert resolved_format("auto") == "text"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert resolved_format("auto") == "json"
    assert resolved_format("text") == "text" and resolved_format("json") == "json"
