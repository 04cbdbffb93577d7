"""A release: one privacy spend, whatever produced it, as the ledger reserves and commits it.

A ``Release`` is what is spent (its dp-accounting event, at its delta), on whose behalf (its
``Scope``: a job, a statistics release) and how its entry is described and refused (its
``ReleaseKind``). ``app.ledger.service.reserve_release`` is the one admission path for every
kind: the dataset (and its patient space) locked, the filter's verdict, the patients left
out, the entry inserted and its reserve record chained; ``commit`` and ``give_back`` settle
an entry, whose status is derived from its records. A new kind of spend is one module with
one ``ReleaseKind`` (its descriptive columns and its refusal), calling that path.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from dp_accounting.dp_event import DpEvent
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ledger import chain
from app.ledger.models import COMMIT, RELEASE, LedgerEntry
from app.privacy import events

if TYPE_CHECKING:
    from app.ledger.admission import Shortfall

SCOPES = {"job": LedgerEntry.job_id, "statistics_release": LedgerEntry.statistics_release_id}
"""A scope's kind -> the entry's column naming it (exactly one is set on an entry)."""


@dataclass(frozen=True)
class Scope:
    """On whose behalf a release spends: a queued job, or a statistics release."""

    kind: str  # a key of SCOPES
    id: int

    @classmethod
    def job(cls, job_id: int) -> "Scope":
        return cls("job", job_id)

    @classmethod
    def statistics_release(cls, release_id: int) -> "Scope":
        return cls("statistics_release", release_id)

    def columns(self) -> dict[str, int]:
        """The entry's owner column set to this scope's id."""
        return {SCOPES[self.kind].key: self.id}


class ReleaseKind(Protocol):
    """How a kind of spend is written: its entry's descriptive columns and its 409."""

    name: str

    def columns(self, said: events.Description) -> dict[str, Any]:
        """The entry's mechanism columns from its event's description.

        Raises:
            ValueError: the event is not of this kind's shape (a caller's bug).
        """

    def refuse(self, refused: "Shortfall", entry: LedgerEntry, release: "Release") -> NoReturn:
        """Raise the kind's BudgetExceeded (the largest target that fits, in its words)."""


@dataclass(frozen=True)
class Release:
    """One spend: its scope, its event at its delta, its kind; ``status`` is its entry's."""

    scope: Scope
    event: DpEvent
    delta: float
    kind: ReleaseKind
    clip_norm: float = 1.0  # the per-sample clip norm recorded with a DP-SGD mechanism
    tail_probability: float | None = None  # a search's P(K > M) (app.privacy.selection)
    target_epsilon: float | None = None  # what the caller asked for, for the refusal's words


def entry_of(*, session: Session, scope: Scope) -> LedgerEntry | None:
    """The scope's entry, as stored now (None: it has none)."""
    return session.scalar(select(LedgerEntry).where(SCOPES[scope.kind] == scope.id)
                          .execution_options(populate_existing=True))


def commit(*, session: Session, entry: LedgerEntry, steps: int | None = None) -> None:
    """Charge the entry's first ``steps`` steps (all of them by default) for good; the caller
    holds the dataset lock."""
    chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=COMMIT,
                 steps=entry.steps if steps is None else steps)


def give_back(*, session: Session, entry: LedgerEntry) -> None:
    """Give back what is not committed; the caller holds the dataset lock."""
    chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=RELEASE)
