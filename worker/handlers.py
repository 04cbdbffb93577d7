"""Task handlers registered by name: what the worker runs for each kind of queued job.

A handler is a kind's name, how it reads its own typed payload from the claimed job row
(``parse``: a pydantic model the kind declares, next to its handler or its API schema) and
the task that runs it to its end (``run``, given a ``ClaimedJob`` of that payload). The runner
claims a row and dispatches by the kind's name alone (``claimed_of``, ``handler_for``): it
knows no kind and no payload. Each kind's handler is registered with ``@task_handler`` by its
module of ``worker.kinds``, which ``handlers`` imports whole (``app.core.plugins.modules``), so
a new kind's handler is its module there; the kind itself (its word, what it stores) is its
module of ``app.jobs.kinds``.

A task finishes its job itself and returns the outcome for the worker's log; it raises
``LeaseLost`` when the job was taken back meanwhile, and any other exception fails the job.
"""

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from pydantic import BaseModel

from app.core import plugins
from app.core.database import Database
from app.jobs.models import Job
from worker.heartbeat import Heartbeat

PACKAGE = "worker.kinds"
"""The package whose modules register the handlers, imported once before the first dispatch."""


class JobWorker(Protocol):
    """What a task needs of ``worker.runner.Worker``."""

    database: Database
    worker_id: str
    lease_seconds: float
    device: torch.device
    stop_requested: threading.Event
    heartbeat: Heartbeat | None  # of the job running now


PayloadT = TypeVar("PayloadT", bound=BaseModel, covariant=True)


@dataclass(frozen=True)
class ClaimedJob(Generic[PayloadT]):
    """A claimed job as its handler parsed it: read outside the claim's transaction."""

    job_id: int
    dataset_id: int
    kind: str
    payload: PayloadT  # the kind's own typed payload (its handler's ``parse``)


Task = Callable[[JobWorker, ClaimedJob[Any]], str]
Parse = Callable[[Job], BaseModel]
TaskT = TypeVar("TaskT", bound=Callable[..., str])


@dataclass(frozen=True)
class Handler:
    kind: str
    parse: Parse
    run: Task


class UnknownKind(LookupError):
    """A queued job whose kind no handler is registered for (the job fails, named)."""


_HANDLERS: dict[str, Handler] = {}
_loaded = threading.Lock()


def task_handler(kind: str, *, parse: Parse) -> Callable[[TaskT], TaskT]:
    """Register the decorated task as the handler of jobs of ``kind``; one handler per kind."""

    def register(run: TaskT) -> TaskT:
        known = _HANDLERS.get(kind)
        if known is not None and known.run is not run:
            raise ValueError(f"a handler for job kind {kind!r} is already registered")
        _HANDLERS[kind] = Handler(kind, parse, cast(Task, run))
        return run

    return register


def handlers() -> dict[str, Handler]:
    """Every registered handler by kind, the modules of ``worker.kinds`` imported first."""
    with _loaded:
        plugins.modules(importlib.import_module(PACKAGE), skip=())
    return dict(_HANDLERS)


def handler_for(kind: str) -> Handler:
    """Raises: UnknownKind: no handler is registered for ``kind``."""
    found = handlers().get(str(kind))
    if found is None:
        raise UnknownKind(f"no task handler is registered for job kind {kind!r}")
    return found


def claimed_of(job: Job) -> ClaimedJob[BaseModel]:
    """The claimed ``job`` with its payload as its kind's handler parses it (in the claim's
    transaction)."""
    return ClaimedJob(job.id, job.dataset_id, str(job.kind), handler_for(job.kind).parse(job))
