"""Admission: the filters that decide whether a release may be charged, whom it leaves out,
and the 409 of a refusal.

Two filters, both Rényi filters at one fixed order (``app.privacy.filter``): the dataset's own
(its budget) admits or refuses the release, on public facts alone; for a dataset in a patient
space, the per-patient filter of every block of patients it holds (``app.ledger.spaces``) then
leaves out the blocks that cannot afford it (``app.ledger.left_out``). The caller holds the
dataset's lock, which is taken after the space's (``app.ledger.service.lock_dataset``).
"""

import math
from dataclasses import dataclass
from typing import Any, NoReturn

from dp_accounting.dp_event import DpEvent, RepeatAndSelectDpEvent
from sqlalchemy.orm import Session

from app.ledger import left_out, spaces
from app.ledger import spend as ledger_spend
from app.ledger.errors import BudgetExceeded
from app.ledger.models import LedgerEntry
from app.ledger.spend import Budgeted, InPatientSpace
from app.privacy import accounting, selection
from app.privacy import noise as noise_search
from app.privacy.figures import round_down
from app.privacy.filter import CITATION, RenyiFilter, rdp_at

COMPOSITION_ACCOUNTANT = ledger_spend.COMPOSITION_ACCOUNTANT

DATASET = "dataset"
"""A refusal's scope: always the dataset's own budget. The per-patient filter leaves patients
out instead of refusing (``patients_left_out``)."""


@dataclass(frozen=True)
class Shortfall:
    """Why the filter refuses an entry: its filter, the charged entries and their RDP."""

    guard: RenyiFilter
    entries: list[LedgerEntry]
    spent: float  # RDP of the charged entries at the filter's order
    scope: str = DATASET  # whose budget refuses: the dataset's

    def spend_after(self, entry: LedgerEntry) -> float:
        """The (epsilon, delta) the filter would give the entries plus ``entry``."""
        guard = ledger_spend.tailed(self.guard, [*self.entries, entry])
        return guard.epsilon_of(self.spent + ledger_spend.spent_rdp([entry], guard.order))

    @property
    def spent_epsilon(self) -> float:
        return ledger_spend.filtered_epsilon(self.guard, self.entries)


def shortfall(*, session: Session, dataset: Budgeted, entry: LedgerEntry) -> Shortfall | None:
    """The dataset's own filter (``app.privacy.filter``), for any entry (a job's or a
    statistics release's): None (admitted) if it admits it, else what the refusal reports.

    The RDP of the dataset's charged entries plus ``entry``, at its fixed order, within its
    budget's bound (or, for its first charged entry, that entry's own tight epsilon within the
    budget). Only public facts decide: the dataset's declared budget and the release's
    mechanism. The per-patient filter never refuses (``patients_left_out``).

    The caller holds the dataset lock. A dataset without a budget (public) admits everything.
    """
    guard = ledger_spend.filter_of(dataset)
    if guard is None:
        return None
    entries = ledger_spend.charged_entries(session=session, dataset_id=dataset.id)
    return _refusal(guard, entries, entry)


def _refusal(guard: RenyiFilter, entries: list[LedgerEntry], entry: LedgerEntry,
             spent: float | None = None, own: float | None = None) -> Shortfall | None:
    """One filter's decision on ``entry`` next to the charged ``entries``; ``spent`` and
    ``own`` (their RDP and the entry's at the filter's order) when the caller has them."""
    spent = ledger_spend.spent_rdp(entries, guard.order) if spent is None else spent
    own = ledger_spend.spent_rdp([entry], guard.order) if own is None else own
    if ledger_spend.tailed(guard, [*entries, entry]).admits(spent, own):
        return None
    if not entries and ledger_spend.single_release_epsilon(entry, guard.delta) <= guard.epsilon:
        return None
    return Shortfall(guard, entries, spent)


def patients_left_out(*, session: Session, dataset: InPatientSpace,
                      entry: LedgerEntry) -> left_out.LeftOut | None:
    """The per-patient filter of the dataset's patient space (``app.ledger.spaces``), for an
    entry its own filter admitted: which of its patients the release leaves out.

    Every live block of the dataset's patients is checked with the space's filter: the RDP of
    the charged entries that read the block's patients (``left_out.reads``), plus ``entry``,
    at the space's order, within the per-patient budget (the same first-release rule, per
    block). A block that cannot afford the release is left out of it (Feldman and Zrnic):
    the decision depends on its own patients' history alone, never refuses the release, and
    is recorded on the entry once (``app.ledger.left_out``). None: everybody is read.

    The caller holds the dataset lock (and so the space's).
    """
    space_id = dataset.patient_space_id
    if space_id is None or ledger_spend.filter_of(dataset) is None:
        return None
    space = session.get(spaces.PatientSpace, space_id)
    if space is None:
        raise ledger_spend.LedgerIntegrityError(
            f"dataset {dataset.id} names a missing patient space")
    guard = space.guard
    patterns = spaces.patterns_of(session=session, space_id=space_id, dataset_id=dataset.id)
    by_dataset = ledger_spend.charged_by_dataset(
        session=session, dataset_ids={d for p in patterns for d in p})
    # Each entry's RDP is computed once, not once per block it charges (a dataset is in
    # thousands of blocks: bench/patient_budget.py).
    rdp = {e.id: ledger_spend.spent_rdp([e], guard.order)
           for found in by_dataset.values() for e in found}
    own = ledger_spend.spent_rdp([entry], guard.order)
    refused = []
    for pattern in patterns:
        charged = [e for d in pattern for e in by_dataset.get(d, [])
                   if left_out.reads(e, pattern)]
        spent = math.fsum(rdp[e.id] for e in charged)
        if _refusal(guard, charged, entry, spent, own) is not None:
            refused.append(pattern)
    return left_out.decided(patterns, refused)


def admit(session: Session, dataset: Budgeted, entry: LedgerEntry) -> None:
    """Admit a job's ``entry`` by the filter (``shortfall``).

    Raises:
        BudgetExceeded: with the spend so far, what remains, and the largest target epsilon
            (at the job's delta, for the same sample rate and steps) that would fit now.
    """
    refused = shortfall(session=session, dataset=dataset, entry=entry)
    if refused is not None:
        refuse(refused, entry)


def _largest_fitting_target(
    guard: RenyiFilter, entries: list[LedgerEntry], entry: LedgerEntry, spent: float
) -> float | None:
    """The largest target epsilon (at the entry's delta, same sample rate and steps) that the
    filter would admit now, rounded down; None when no allowed noise fits."""
    event = ledger_spend.recorded_event(entry)
    if isinstance(event, RepeatAndSelectDpEvent):
        return _largest_fitting_search(guard, entries, event, spent, entry.delta)
    noise = guard.largest_fitting_noise(spent, entry.sample_rate, entry.steps)
    if not entries:  # the first-release rule may allow less noise
        alone = noise_search.noise_for_target(
            target_epsilon=guard.epsilon, delta=guard.delta, sample_rate=entry.sample_rate,
            steps=entry.steps, accountant=ledger_spend.TIGHT_ACCOUNTANT,
        ) if _reachable(guard, entry) else None
        noise = alone if noise is None else noise if alone is None else min(noise, alone)
    if noise is None:
        return None
    mechanism = accounting.Mechanism(noise, entry.sample_rate, entry.steps)
    target = accounting.create_accountant(ledger_spend.TIGHT_ACCOUNTANT).epsilon(
        [mechanism], entry.delta
    )
    return round_down(target) if math.isfinite(target) else None


def _largest_fitting_search(guard: RenyiFilter, entries: list[LedgerEntry],
                            event: RepeatAndSelectDpEvent, spent: float,
                            delta: float) -> float | None:
    """The same for a hyper-parameter search (same runs, distribution and mean): the search
    at the smallest per-run noise the filter admits (or, first, its own epsilon within the
    budget), by its own figure (RDP: ``app.privacy.selection``)."""
    def fits(candidate: DpEvent) -> bool:
        if guard.admits(spent, rdp_at([candidate], guard.order)):
            return True
        return not entries and selection.search_epsilon(candidate, guard.delta) <= guard.epsilon

    noise = selection.smallest_fitting_noise(event, fits)
    if noise is None:
        return None
    target = selection.search_epsilon(selection.with_run_noise(event, noise), delta)
    return round_down(target) if math.isfinite(target) else None


def _reachable(guard: RenyiFilter, entry: LedgerEntry) -> bool:
    largest = accounting.Mechanism(accounting.MAX_NOISE_MULTIPLIER, entry.sample_rate, entry.steps)
    tight = accounting.create_accountant(ledger_spend.TIGHT_ACCOUNTANT)
    return tight.epsilon([largest], guard.delta) <= guard.epsilon


def over_budget(refused: Shortfall, entry: LedgerEntry, *, release: str,
                largest: float | None, fits: str) -> BudgetExceeded:
    """The 409 of a refused release (a job, a statistics release): what the dataset has spent,
    what remains, what the release would bring it to, and the largest target that fits.

    Args:
        release: what is refused, in words: "job" (its members ``job_epsilon`` and
            ``composed_epsilon_with_job``) or "statistics release" (``release_epsilon`` and
            ``composed_epsilon_with_release``). Every member is a literal keyword: the release
            inventory's test enumerates each error body's members from the source.
    """
    guard = refused.guard
    after, before = refused.spend_after(entry), refused.spent_epsilon
    remaining = max(guard.epsilon - before, 0.0)
    own, composed = entry.epsilon_prv, accounting.finite_or_none(after)
    figures: dict[str, Any] = (
        {"job_epsilon": own, "composed_epsilon_with_job": composed} if release == "job"
        else {"release_epsilon": own, "composed_epsilon_with_release": composed})
    return BudgetExceeded(
        f"this {release} would bring the dataset's composed spend (budget "
        f"{guard.epsilon:g}) to {after:.4g}; remaining "
        f"epsilon is {remaining:.4g}; {fits}",
        budget_scope=refused.scope,
        budget={"epsilon": guard.epsilon, "delta": guard.delta},
        spent_epsilon=before,
        remaining_epsilon=remaining,
        largest_fitting_target_epsilon=largest,
        **figures,
        accountant=COMPOSITION_ACCOUNTANT,
        filter={"kind": "renyi", "order": guard.order, "citation": CITATION},
    )


def refuse(refused: Shortfall, entry: LedgerEntry) -> NoReturn:
    """A job's BudgetExceeded: the largest target (same sample rate and steps) that fits."""
    largest = _largest_fitting_target(
        ledger_spend.tailed(refused.guard, [*refused.entries, entry]), refused.entries, entry,
        refused.spent)
    fits = (f"the largest target epsilon that fits now is {largest:g}" if largest is not None
            else "no noise level up to the maximum fits this plan: take fewer steps")
    raise over_budget(refused, entry, release="job", largest=largest, fits=fits)
