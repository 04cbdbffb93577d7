"""A real uvicorn server in a thread of the test's own process, on a free loopback port: for
tests that need real sockets (slow bodies, log lines) but the test's own database and settings."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from app.core.database import Database, set_database


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def threaded_server(db: Database, app: FastAPI, *, log_level: str = "warning") -> Iterator[str]:
    """Serve ``app`` on ``db`` until the block ends; yields ``host:port``."""
    set_database(db)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           log_level=log_level))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        set_database(None)
