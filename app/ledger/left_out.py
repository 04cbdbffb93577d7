"""Patients left out of a release: the per-patient filter decides per patient, not per release.

Feldman and Zrnic's individual Rényi filter (2021) keeps one filter per individual and, when an
individual's filter cannot afford a release, *drops that individual's record* from it; the
decision may depend on the individual's own history only, so the release is still DP for
everyone. Refusing the whole release instead (as a dataset's own filter does) would make the
refusal an exact membership oracle: whether a table's release is admitted would then depend on
which other tables hold one of its patients.

Patients of one block (``app.ledger.spaces``) are in the same datasets, so they have the same
history and the same decision: a release on dataset D records, at admission, the **patterns**
(a block's sorted datasets) whose patients it leaves out, and its **scope**, every dataset that
D's live blocks held then. Blocks only ever gain datasets later (an upload adds its dataset to
the patients it holds; erasing rows leaves the blocks), and a dataset joins a space once, so a
patient whose block now holds the datasets ``P`` had, when the release was admitted, exactly
the pattern ``P & scope``: the decision is found again for any later block of any patient,
without a history of splits.
"""

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol


class _HasLeftOut(Protocol):
    left_out: dict[str, Any] | None


@dataclass(frozen=True)
class LeftOut:
    """Which patients a release leaves out: those whose pattern at admission is listed."""

    scope: frozenset[int]
    patterns: frozenset[tuple[int, ...]]

    def leaves_out(self, datasets: Iterable[int]) -> bool:
        """Whether a patient whose block holds ``datasets`` now was left out."""
        return tuple(sorted(self.scope.intersection(datasets))) in self.patterns

    def as_json(self) -> dict[str, Any]:
        """As the ledger entry stores (and hashes) it: sorted lists."""
        return {"scope": sorted(self.scope), "patterns": sorted(list(p) for p in self.patterns)}

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> "LeftOut":
        return cls(frozenset(int(d) for d in stored["scope"]),
                   frozenset(tuple(sorted(int(d) for d in p)) for p in stored["patterns"]))


def recorded(found: LeftOut | None) -> dict[str, Any]:
    """What an admitted entry stores and hashes: the decision (empty when nobody is left out)
    with a random salt. The salt is never served: a role that reads a ledger's hashes and
    every other field of its records cannot recompute a hash to learn whether anybody was
    left out, which depends on other tables."""
    decided = {"scope": [], "patterns": []} if found is None else found.as_json()
    return {**decided, "salt": secrets.token_hex(16)}


def of(entry: _HasLeftOut) -> LeftOut | None:
    """The entry's left-out patients; None when it reads every patient of its dataset."""
    stored = getattr(entry, "left_out", None)
    return None if not stored or not stored.get("patterns") else LeftOut.from_json(stored)


def reads(entry: _HasLeftOut, datasets: Iterable[int]) -> bool:
    """Whether ``entry``'s release read (and so charges) patients whose block holds
    ``datasets`` (the caller has checked that the entry's dataset is one of them)."""
    found = of(entry)
    return found is None or not found.leaves_out(datasets)


def decided(scope: Iterable[tuple[int, ...]], refused: Iterable[tuple[int, ...]]
            ) -> LeftOut | None:
    """The record of an admission: ``scope``, the patterns of the dataset's live blocks;
    ``refused``, those the per-patient filter cannot afford (None: nobody is left out)."""
    patterns = frozenset(tuple(p) for p in refused)
    if not patterns:
        return None
    return LeftOut(frozenset(d for p in scope for d in p), patterns)
