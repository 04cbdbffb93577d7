"""What a kind of job is to the service: its word on the queue and what its jobs store.

A kind is declared once, in its own module of ``app.jobs.kinds`` (one ``JobKind`` instance);
the worker's handler for it (its typed payload, how it reads it from the job row, the task)
is its module of ``worker.kinds``. The API knows a kind by this declaration alone: the words
a job view may show (OpenAPI's ``JobKind`` enum), the model a finished job's result must
match before it is stored, and whether the job view serves that result.
"""

from typing import Any, Self

from app.core.plugins import Registered
from app.jobs.held_out import Stored

WORD_LENGTH = 16  # the ``job.kind`` column's VARCHAR length

KIND_WORDS = Registered("JobKind", "The kinds of job sharing the one queue.")
"""A job view's ``kind``: one of the registered kinds' words (``app.jobs.kinds.names``)."""


class JobKind(str):
    """A kind of job: its word (what ``job.kind`` stores and a job view shows), where the API
    lists it, and what its jobs store.

    It is its word, as a ``StrEnum`` member is: it compares equal to a stored row's kind, is
    written into the column and served as it is.

    Args:
        word: the kind's name on the queue (at most 16 characters: the column's length).
        order: its place in the API's lists (OpenAPI's enum), before the word itself.
        results: the model of what a finished job stores (``Job.metrics``): a key it does not
            declare is refused, so no unclassified figure is ever stored.
        served: whether the job view (``JobOut.metrics``, the privacy report) serves that
            result; False where the kind's own resource serves it (a monitoring run's).
        listed: whether ``GET /v1/jobs`` lists its jobs (the training jobs); a kind with a
            resource of its own (audits, monitoring runs, comparisons) is listed there.
        charged_ahead: whether the task commits its spend itself as it goes (a federated
            part's rounds), so finishing the job gives none of its reserve back.

    Raises:
        ValueError: a word longer than the column, or not a lower-case identifier.
    """

    order: int
    results: type[Stored]
    served: bool
    listed: bool
    charged_ahead: bool

    def __new__(cls, word: str, *, order: int, results: type[Stored], served: bool = True,
                listed: bool = False, charged_ahead: bool = False) -> Self:
        if len(word) > WORD_LENGTH or not word.isidentifier() or word != word.lower():
            raise ValueError(f"a job kind's word is a lower-case identifier of at most "
                             f"{WORD_LENGTH} characters, not {word!r}")
        kind = super().__new__(cls, word)
        kind.order, kind.results, kind.served = order, results, served
        kind.listed, kind.charged_ahead = listed, charged_ahead
        return kind

    @property
    def name(self) -> str:
        """The kind's word, as a plain ``str``."""
        return str.__str__(self)

    def __copy__(self) -> Self:
        return self  # one declaration per kind: a copy is the kind itself

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        """Pickled as its word (a plain ``str``, what the column stores)."""
        return str, (self.name,)
