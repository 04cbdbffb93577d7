"""A dataset's ledger as its privacy report lists it: each entry with the release it paid for,
and the spend after each charged one.

Every entry and timeline point names its release in words and by link
(``app.reports.release_names``), so the ledger reads without the database.
"""

import math

from dp_accounting.dp_event import RepeatAndSelectDpEvent
from sqlalchemy.orm import Session

from app.jobs.search_schemas import SearchCharge
from app.ledger import spend as ledger_spend
from app.ledger.models import NON_PRIVATE, LedgerEntry
from app.privacy.accounting import finite_or_none
from app.privacy.events import describe
from app.privacy.figures import epsilon_text
from app.privacy.filter import RenyiFilter
from app.reports import ledger_words, release_names
from app.reports.release_schemas import ReleaseRef
from app.reports.schemas import EpsilonByAccountant, LedgerEntryView, TimelinePointView


def entry_view(entry: LedgerEntry, release: ReleaseRef,
               guard: RenyiFilter | None = None) -> LedgerEntryView:
    """The entry's own columns, its ``release``, and what the report derives from them (with
    the dataset's filter ``guard``: the filter's working figure too)."""
    non_private = entry.mechanism == NON_PRIVATE
    return LedgerEntryView.from_row(
        entry,
        release=release,
        non_private=non_private,
        remainder_released=entry.released and bool(entry.committed_steps),
        epsilon=EpsilonByAccountant(rdp=entry.epsilon_rdp, pld=entry.epsilon_prv,
                                    prv=entry.epsilon_prv),  # prv: pld's deprecated alias
        epsilon_text=epsilon_text(entry.epsilon_rdp, non_private=non_private),
        filter_rdp=ledger_words.filter_rdp(entry, guard),
        search=_search_charge(entry),
    )


def _search_charge(entry: LedgerEntry) -> SearchCharge | None:
    """A search entry's distribution of runs, read off its event (None: another release)."""
    event = ledger_spend.recorded_event(entry)
    if not isinstance(event, RepeatAndSelectDpEvent):
        return None
    run = describe(event.event)
    poisson = math.isinf(event.shape)
    return SearchCharge(runs="poisson" if poisson else "truncated_negative_binomial",
                        mean_runs=event.mean, shape=None if poisson else event.shape,
                        run_steps=run.steps or 0)


def _timeline_view(point: ledger_spend.TimelinePoint, release: ReleaseRef) -> TimelinePointView:
    return TimelinePointView.from_row(
        point,
        release=release,
        entry_epsilon=finite_or_none(point.entry_epsilon),
        composed_epsilon=finite_or_none(point.composed_epsilon),
        naive_epsilon=finite_or_none(point.naive_epsilon),
        non_private=math.isinf(point.entry_epsilon),
        composed_epsilon_text=epsilon_text(point.composed_epsilon),
    )


def views(*, session: Session, entries: list[LedgerEntry], guard: RenyiFilter | None,
          timeline: list[ledger_spend.TimelinePoint]
          ) -> tuple[list[LedgerEntryView], list[TimelinePointView]]:
    """The entries and the timeline as the report lists them, each naming its release (the
    releases' jobs are read in one query)."""
    named = release_names.names(session=session, entries=entries)
    return ([entry_view(e, named[e.id], guard) for e in entries],
            [_timeline_view(p, named[p.entry_id]) for p in timeline])
