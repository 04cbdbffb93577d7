"""A statistics release in the ledger: the same filter, lock, chain and 409 as a training job.

A release (``app.statistics``) adds noise once to a few vectors: its ledger entry records the
dp-accounting event the release hands over (a ``ComposedDpEvent`` of one Gaussian or Laplace
event per vector, by its noise multiplier: noise scale over the vector's sensitivity,
``app.privacy.mechanisms``), one step at sample rate 1, and its vectors' multipliers as
``components``. The accountants compose the event as they compose a job's; nothing here
tells a Gaussian release from a Laplace one. It is admitted by the dataset's Rényi filter
(``service.shortfall``) under the dataset lock, like a job, and committed in the same
transaction, before its answers leave: a release touches the data once, so it is charged for
good at once.
"""

import math
from dataclasses import dataclass
from typing import Any, NoReturn

from dp_accounting.dp_event import DpEvent
from sqlalchemy.orm import Session

from app.ledger import release
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.ledger.release import Release, Scope
from app.ledger.spend import Budgeted
from app.privacy import events, fitting, mechanisms
from app.privacy.figures import round_down


@dataclass(frozen=True)
class ReleaseCharge:
    """What a release spends, from its planned noise alone (no data).

    Args:
        event: the release as a dp-accounting event: one one-shot mechanism per noisy vector
            (``events.one_shot``), each with a positive noise multiplier.
        delta: the delta of the release's figures (a Gaussian target's delta; for a pure
            release, the dataset's budget delta).
        target_epsilon: what the caller asked for (the release's own epsilon is at most this).
    """

    event: DpEvent
    delta: float
    target_epsilon: float

    @property
    def description(self) -> events.Description:
        """The entry's columns; a release's event must fix them all (a one-shot release).

        Raises:
            ValueError: the event is not a release of one-shot mechanisms.
        """
        said = events.describe(self.event)
        if said.components is None or said.noise_multiplier is None:
            raise ValueError(f"a statistics release is one-shot mechanisms composed, not "
                             f"{events.canonical(self.event)}")
        return said


class OneShot:
    """A release of one-shot mechanisms composed (statistics, a monitoring run's, a
    comparison's; a fitted family's training, ``FITTED``): its noisy vectors' multipliers
    recorded as ``components``, charged whole (one step).

    Args:
        name: the kind's name.
        words: what a refusal calls it (``admission.over_budget``'s ``release``).
    """

    def __init__(self, name: str = "one_shot", words: str = "statistics release") -> None:
        self.name, self.words = name, words

    def columns(self, said: events.Description) -> dict[str, Any]:
        if said.components is None or said.noise_multiplier is None:
            raise ValueError(f"a statistics release is one-shot mechanisms composed, not "
                             f"{said.mechanism}")
        return {"mechanism": said.mechanism, "noise_multiplier": said.noise_multiplier,
                "sample_rate": said.sample_rate, "steps": said.steps,
                "components": said.components}

    def refuse(self, refused: ledger_service.Shortfall, entry: LedgerEntry,
               release: Release) -> NoReturn:
        _refuse(refused, entry, ReleaseCharge(release.event, release.delta,
                                              release.target_epsilon or math.inf), self.words)


ONE_SHOT = OneShot()


class Fitted(OneShot):
    """A job of a family that is not DP-SGD (``app.jobs.fitted``): its training is one
    release, reserved and charged whole, refused in a job's words. Its event is a statistics
    release's shape or any composition of Gaussians on the whole table
    (``events.GAUSSIAN_COMPOSITION``, recorded by the one Gaussian it equals)."""

    def __init__(self) -> None:
        super().__init__("fitted", "job")

    def columns(self, said: events.Description) -> dict[str, Any]:
        if said.mechanism != events.GAUSSIAN_COMPOSITION:
            return super().columns(said)
        return {"mechanism": said.mechanism, "noise_multiplier": said.noise_multiplier,
                "sample_rate": said.sample_rate, "steps": said.steps, "components": None}

    def refuse(self, refused: ledger_service.Shortfall, entry: LedgerEntry,
               release: Release) -> NoReturn:
        said = events.describe(release.event)
        same = (events.one_shot(mechanisms.GAUSSIAN, [float(said.noise_multiplier or 0.0)])
                if said.mechanism == events.GAUSSIAN_COMPOSITION else release.event)
        _refuse(refused, entry, ReleaseCharge(same, release.delta,
                                              release.target_epsilon or math.inf), self.words)


FITTED = Fitted()


def reserve_release(
    *, session: Session, dataset: Budgeted, charge: ReleaseCharge, release_id: int | None = None,
    job_id: int | None = None,
) -> LedgerEntry:
    """Admit statistics release ``release_id`` (or the one-shot release of job ``job_id``: a
    monitoring run, ``app.monitoring``) by the filter and chain its reserve record
    (``ledger_service.reserve_release``, the one path, with its scope).

    Raises:
        BudgetExceeded: as for a job: the spend so far, what remains, and the largest target
            epsilon (same queries and mechanism, at the same delta) that fits now.
        PatientIdsRequired: the dataset's patients are in a space of its own (409).
    """
    if (release_id is None) == (job_id is None):
        raise ValueError("a release is a statistics release's or a job's, exactly one")
    scope = Scope.job(job_id) if job_id is not None else Scope.statistics_release(release_id or 0)
    return ledger_service.reserve_release(session=session, dataset=dataset, release=Release(
        scope=scope, event=charge.event, delta=charge.delta, kind=ONE_SHOT,
        target_epsilon=charge.target_epsilon))


def commit_release(*, session: Session, entry: LedgerEntry) -> None:
    """Charge the release for good: its noise was drawn on the data (same transaction, same
    lock as its reserve)."""
    release.commit(session=session, entry=entry)


def largest_fitting_target(refused: ledger_service.Shortfall, charge: ReleaseCharge
                           ) -> float | None:
    """The largest target epsilon (same queries and split, same mechanism, at the release's
    delta) that the filter admits now, rounded down; None when nothing fits
    (``app.privacy.fitting``)."""
    guard = ledger_spend.tailed(refused.guard, refused.entries)
    fits = fitting.largest_targets(
        charge.event, room=guard.rdp_bound - refused.spent, order=guard.order,
        first_release=None if refused.entries else (guard.epsilon, guard.delta),
        delta=charge.delta)
    best = max((f for f in fits if math.isfinite(f) and f > 0), default=None)
    return None if best is None else round_down(best)


def _refuse(refused: ledger_service.Shortfall, entry: LedgerEntry, charge: ReleaseCharge,
            words: str = "statistics release") -> NoReturn:
    largest = largest_fitting_target(refused, charge)
    fits = (f"the largest target epsilon that fits now is {largest:g}" if largest is not None
            else "no target epsilon fits now")
    raise ledger_service.over_budget(
        refused, entry, release=words, largest=largest, fits=fits)
