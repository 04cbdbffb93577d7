"""The kinds of job on the one queue, found in this package: one module each.

Each module declares one ``base.JobKind`` (its word, its place in the API's lists, the model
of what its jobs store, whether the job view serves it); the package finds them
(``app.core.plugins.members``) and hands the API their words (OpenAPI's ``JobKind`` enum, a
job view's ``kind``) and their served result models (``app.jobs.results.ServedResults``). A
new kind is its module here and its handler's module in ``worker.kinds`` (the worker's
layer, which the API does not import): the queue, the runner and the job views are unchanged.
"""

import sys
from typing import Any

from app.core import plugins
from app.jobs.held_out import Stored
from app.jobs.kinds.base import KIND_WORDS, JobKind
from app.jobs.results import SERVED_RESULTS

KINDS: dict[str, JobKind] = {k.name: k for k in plugins.members(sys.modules[__name__], JobKind)}
"""Every registered kind by its word, in the order the API lists them."""


class UnknownKind(LookupError):
    """A word no module of this package declares (a job row of a kind since removed)."""


def names() -> tuple[str, ...]:
    """The kinds' words, in the order the API lists them."""
    return tuple(KINDS)


def served_results() -> list[type[Stored]]:
    """The result models the job view serves, each once, in the kinds' order."""
    return list(dict.fromkeys(k.results for k in KINDS.values() if k.served))


KIND_WORDS.provide(names)
SERVED_RESULTS.provide(served_results)


def listed() -> list[str]:
    """The words of the kinds ``GET /v1/jobs`` lists (the training jobs)."""
    return [word for word, kind in KINDS.items() if kind.listed]


def find(word: str) -> JobKind | None:
    """The kind named ``word``; None when no module declares it."""
    return KINDS.get(str(word))


def of(word: str) -> JobKind:
    """Raises: UnknownKind: no module declares ``word``."""
    kind = find(word)
    if kind is None:
        raise UnknownKind(f"no job kind {word!r} is declared in {__name__}")
    return kind


def check(word: str, results: dict[str, Any]) -> None:
    """Refuse to store a result with a key (or a value) its kind's model does not declare.

    Raises:
        ValidationError: a key that is not a field (an unclassified release), a missing one,
            or a value of the wrong type.
        UnknownKind: no module declares the job's kind.
    """
    of(word).results.model_validate(results)
