"""Task handlers registered by name: what the worker runs for each kind of queued job.

A handler is a kind's name, how it reads its own payload from the claimed job row (``parse``:
the job's id, dataset and typed plan as a ``ClaimedJob``) and the task that runs it to its
end (``run``). The runner claims a row and dispatches by the kind's name alone
(``claimed_of``, ``handler_for``): it knows no kind. A new kind of work is one module that
registers its handler with ``@task_handler`` and is named in ``MODULES``.

A task finishes its job itself and returns the outcome for the worker's log; it raises
``LeaseLost`` when the job was taken back meanwhile, and any other exception fails the job.
"""

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import torch

from app.core.database import Database
from app.jobs.models import Job
from app.privacy import events
from worker.heartbeat import Heartbeat
from worker.trainers.base import FitPlan
from worker.training import TrainingSpec

MODULES = (
    "worker.search",  # train: one run, or a search's runs
    "worker.privacy_audit.job",  # privacy_audit
    "worker.monitoring.task",  # monitoring
    "worker.monitoring.comparison",  # comparison
    "worker.federated_task",  # federated
)
"""The modules that register the handlers, imported once before the first dispatch."""


class JobWorker(Protocol):
    """What a task needs of ``worker.runner.Worker``."""

    database: Database
    worker_id: str
    lease_seconds: float
    device: torch.device
    stop_requested: threading.Event
    heartbeat: Heartbeat | None  # of the job running now


@dataclass(frozen=True)
class ClaimedJob:
    """A claimed job as its handler parsed it: read outside the claim's transaction."""

    job_id: int
    dataset_id: int
    spec: TrainingSpec
    kind: str = "train"
    search: dict[str, Any] | None = None  # a search job's plan (app.jobs.search; worker.search)
    federation: dict[str, Any] | None = None  # a federated job's part (app.federation.plan)
    fit: FitPlan | None = None  # what its trainer fits (worker.trainers); None: ``spec``'s

    @property
    def plan(self) -> FitPlan:
        """What the job's trainer fits: ``fit``, or DP-SGD's ``spec`` as a fit plan."""
        if self.fit is not None:
            return self.fit
        spec = self.spec
        return FitPlan(kind=spec.kind, hidden_units=spec.hidden_units, delta=spec.delta,
                       seed=spec.seed, settings={},
                       event=events.dpsgd(spec.noise_multiplier, spec.sample_rate, spec.steps),
                       spec=spec)


NO_SPEC = TrainingSpec(kind="none", hidden_units=0, epochs=0, batch_size=0, learning_rate=0.0,
                       momentum=0.0, max_grad_norm=0.0, noise_multiplier=0.0, sample_rate=0.0,
                       steps=0, delta=0.0, seed=0)
"""The spec of a job that trains nothing (a monitoring run: its release is its ledger entry)."""


def claimed_without_spec(job: Job) -> ClaimedJob:
    """A job that trains nothing: its release is on its ledger entry (monitoring, comparison)."""
    return ClaimedJob(job.id, job.dataset_id, NO_SPEC, job.kind)


Task = Callable[[JobWorker, ClaimedJob], str]
Parse = Callable[[Job], ClaimedJob]
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
    """Every registered handler by kind, its modules imported first."""
    with _loaded:
        for module in MODULES:
            importlib.import_module(module)
    return dict(_HANDLERS)


def handler_for(kind: str) -> Handler:
    """Raises: UnknownKind: no handler is registered for ``kind``."""
    found = handlers().get(str(kind))
    if found is None:
        raise UnknownKind(f"no task handler is registered for job kind {kind!r}")
    return found


def claimed_of(job: Job) -> ClaimedJob:
    """The claimed ``job`` as its kind's handler reads it (in the claim's transaction)."""
    return handler_for(job.kind).parse(job)
