"""Engine, session factory and the declarative base shared by every domain."""

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, cast

from fastapi import Depends
from sqlalchemy import CursorResult, Engine, MetaData, Result, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from app.core.settings import settings

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def build_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; SQLite gets WAL, a busy timeout and enforced foreign keys.

    SQLite serialises writers: with a 30 s busy timeout a second writer waits instead of
    failing, which is what the ledger's admission lock relies on.
    """
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            kwargs = {**pool_options(), **kwargs}
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **{**pool_options(), **kwargs})


def pool_options() -> dict[str, Any]:
    """The connection pool's size and how long a request waits for a connection: past it
    SQLAlchemy raises ``TimeoutError``, answered 503 with ``Retry-After`` (app.core.errors)."""
    return {"pool_size": settings.database_pool_size,
            "max_overflow": settings.database_max_overflow,
            "pool_timeout": settings.database_pool_timeout_seconds}


_tokens = itertools.count(1)


class Database:
    """Holds the engine and session factory so tests can point the app at another database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.token = next(_tokens)
        """Unique per instance for the life of the process, unlike ``id()``, which a new
        instance may reuse: per-process caches (keys, scoring models) are keyed on it."""
        self.engine = build_engine(url)
        self.session_factory = sessionmaker(bind=self.engine, expire_on_commit=False)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def session_scope(self) -> Iterator[Session]:
        """A unit of work: commit on success, roll back on any error."""
        session = self.session_factory()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()


_database: Database | None = None
_database_lock = threading.Lock()
"""Held while the process-wide database is created or swapped: a background thread creating
the default one must not overwrite a database set meanwhile (a test's, the CLI's)."""


def get_database() -> Database:
    """The process-wide database, created lazily from settings."""
    global _database
    with _database_lock:
        if _database is None:
            _database = Database(settings.database_url)
        return _database


def set_database(database: Database | None) -> None:
    """Swap the process-wide database (tests, CLI with an explicit URL)."""
    global _database
    with _database_lock:
        _database = database


def affected_rows(result: Result[Any]) -> int:
    """The number of rows an UPDATE or DELETE matched.

    ``Session.execute`` is typed to return a ``Result``; for a DML statement it is a
    ``CursorResult``, the one that carries ``rowcount``.
    """
    return cast(CursorResult[Any], result).rowcount


def get_session() -> Iterator[Session]:
    """A route's unit of work: ``session_scope``, the one way a transaction ends.

    Routes never commit: the transaction commits when the route returns and rolls back when it
    raises. Work that must follow a commit (waking a worker) hooks ``after_commit``.
    """
    with get_database().session_scope() as session:
        yield session


# scope="function": the commit runs *before* the response is sent, so a failed commit is an
# error answer, never a 2xx for work that was rolled back (the default scope would end the
# transaction only after the response had gone out).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
