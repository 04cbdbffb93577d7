"""A statistics release in the ledger: the same filter, lock, chain and 409 as a training job.

A release (``app.statistics``) adds Gaussian or Laplace noise once to a few vectors; each
vector is a *component* of its ledger entry, recorded by its noise multiplier (noise scale over
the vector's sensitivity, ``app.privacy.mechanisms``). The entry is one step at sample rate 1:
a Gaussian release is charged exactly as ``Mechanism(s, 1.0, 1)`` with s the components'
composed multiplier, a Laplace release by the sum of its components' RDP (Mironov 2017,
Prop. 6). It is admitted by the dataset's Rényi filter (``service.shortfall``) under the
dataset lock, like a job, and committed in the same transaction, before its answers leave:
a release touches the data once, so it is charged for good at once.
"""

import math
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
from sqlalchemy.orm import Session

from app.core.time import utcnow
from app.ledger import chain
from app.ledger import service as ledger_service
from app.ledger import spend as ledger_spend
from app.ledger.models import COMMIT, GAUSSIAN_RELEASE, RESERVE, LedgerEntry
from app.ledger.spend import Budgeted
from app.privacy import accounting, mechanisms
from app.privacy.figures import round_down


@dataclass(frozen=True)
class ReleaseCharge:
    """What a release spends, from its planned noise alone (no data).

    Args:
        kind: ``gaussian`` or ``laplace``.
        components: each noisy vector's noise multiplier (> 0).
        delta: the delta of the release's figures (a Gaussian target's delta; for Laplace,
            which is pure, the dataset's budget delta).
        target_epsilon: what the caller asked for (the release's own epsilon is at most this).
    """

    kind: str
    components: tuple[float, ...]
    delta: float
    target_epsilon: float

    @property
    def noise_multiplier(self) -> float:
        return mechanisms.equivalent_multiplier(self.kind, self.components)


def _figures(charge: ReleaseCharge) -> dict[str, float]:
    """The release's epsilon at its delta: by RDP, and by its tight figure ("prv" column)."""
    if charge.kind == GAUSSIAN_RELEASE:
        gaussian = accounting.Mechanism(charge.noise_multiplier, 1.0, 1)
        return accounting.epsilon_by_accountant([gaussian], charge.delta)
    curve = mechanisms.component_rdp(charge.kind, charge.components, accounting.ORDERS)
    rdp = accounting.rdp_to_epsilon(curve, charge.delta)
    return {"rdp": rdp, "prv": min(rdp, mechanisms.laplace_epsilon(charge.components))}


def reserve_release(
    *, session: Session, dataset: Budgeted, release_id: int, charge: ReleaseCharge
) -> LedgerEntry:
    """Admit statistics release ``release_id`` by the filter and chain its reserve record.

    Takes the dataset lock first, in the transaction that inserts the release, so concurrent
    jobs and releases are serialised and cannot overspend together.

    Raises:
        BudgetExceeded: as for a job: the spend so far, what remains, and the largest target
            epsilon (same queries and mechanism, at the same delta) that fits now.
    """
    budget = ledger_service.lock_dataset(session=session, dataset_id=dataset.id)
    figures = _figures(charge)
    entry = LedgerEntry(
        dataset_id=dataset.id, statistics_release_id=release_id, mechanism=charge.kind,
        noise_multiplier=charge.noise_multiplier, sample_rate=1.0, steps=1, clip_norm=1.0,
        delta=charge.delta, accountant=ledger_spend.COMPOSITION_ACCOUNTANT,
        components=[float(c) for c in charge.components], created_at=utcnow(),
        epsilon_rdp=accounting.finite_or_none(figures["rdp"]),
        epsilon_prv=accounting.finite_or_none(figures["prv"]),
    )
    refused = ledger_service.shortfall(session=session, dataset=budget, entry=entry)
    if refused is not None:
        _refuse(refused, entry, charge)
    session.add(entry)
    session.flush()
    chain.append(session=session, dataset_id=dataset.id, entry=entry, kind=RESERVE)
    return entry


def commit_release(*, session: Session, entry: LedgerEntry) -> None:
    """Charge the release for good: its noise was drawn on the data (same transaction, same
    lock as its reserve)."""
    chain.append(session=session, dataset_id=entry.dataset_id, entry=entry, kind=COMMIT,
                 steps=entry.steps)


def _gaussian_fits(refused: ledger_service.Shortfall, charge: ReleaseCharge) -> list[float]:
    guard, room = refused.guard, refused.guard.rdp_bound - refused.spent
    mus = [math.sqrt(2.0 * room / guard.order)] if room > 0 else []
    if not refused.entries:  # the first-release rule: its exact epsilon may take the budget
        mus.append(mechanisms.gaussian_mu(guard.epsilon, guard.delta))
    return [accounting.gaussian_epsilon([accounting.Mechanism(1.0 / mu, 1.0, 1)], charge.delta)
            for mu in mus]


def _laplace_fits(refused: ledger_service.Shortfall, charge: ReleaseCharge) -> list[float]:
    """Scale every component's epsilon by one factor: the largest total that fits the room."""
    guard, room = refused.guard, refused.guard.rdp_bound - refused.spent
    total = mechanisms.laplace_epsilon(charge.components)
    fractions = [1.0 / c / total for c in charge.components]
    order = np.array([guard.order])

    def rdp(target: float) -> float:
        return float(sum(mechanisms.laplace_rdp(target * f, order)[0] for f in fractions))

    fits = [guard.epsilon] if not refused.entries else []  # first release: pure eps <= budget
    if room > 0:
        low, high = 0.0, 2.0 * room  # Laplace RDP <= its pure epsilon, so ``room`` fits
        while rdp(high) <= room and high < 1e6:
            low, high = high, 2.0 * high
        for _ in range(100):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if rdp(mid) <= room else (low, mid)
        fits.append(low)
    return fits


def largest_fitting_target(refused: ledger_service.Shortfall, charge: ReleaseCharge
                           ) -> float | None:
    """The largest target epsilon (same queries and split, same mechanism, at the release's
    delta) that the filter admits now, rounded down; None when nothing fits."""
    fits = (_gaussian_fits if charge.kind == GAUSSIAN_RELEASE else _laplace_fits)(refused,
                                                                                    charge)
    best = max((f for f in fits if math.isfinite(f) and f > 0), default=None)
    return None if best is None else round_down(best)


def _refuse(refused: ledger_service.Shortfall, entry: LedgerEntry, charge: ReleaseCharge
            ) -> NoReturn:
    largest = largest_fitting_target(refused, charge)
    fits = (f"the largest target epsilon that fits now is {largest:g}" if largest is not None
            else "no target epsilon fits now")
    raise ledger_service.over_budget(
        refused, entry, release="statistics release", largest=largest, fits=fits)
