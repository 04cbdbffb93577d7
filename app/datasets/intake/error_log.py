"""The errors of one upload, and where a batch's rows sit in the file.

Every rule is counted exactly (a vectorised count costs nothing next to parsing), but only the
first ``MAX_ERRORS`` errors in reading order are kept with their row, so a table of two million
bad rows answers with a short, readable list and the true total.

Row numbers are 1-based data rows (the header is not counted). A CSV line that does not parse
(wrong number of fields) is dropped by the reader and recorded in ``BatchRows.skipped``, so the
rows after it keep their true numbers.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_ERRORS = 100


class ErrorLog:
    """The errors of one upload: the first ``cap`` in reading order and the total.

    ``complete`` is False when reading stopped early (a table over the row limit) or a rule
    could not be decided: ``total`` then counts what was found, a lower bound. ``listed_all``
    holds only when ``items`` is every error there is.
    """

    def __init__(self, cap: int = MAX_ERRORS) -> None:
        self.cap, self.total, self.complete = cap, 0, True
        self.items: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self._tables = 0  # table-level errors among the pending ones

    def add(self, message: str, allowed: str, *, column: str | None = None,
            rows: np.ndarray | None = None, count: int | None = None) -> None:
        """One table-level error (``rows`` None: the header, the file) or one per row."""
        room = self.cap - len(self.items)
        if rows is None:  # it sorts first: past ``cap`` of them, more are counted, not listed
            listed: list[int | None] = [None] if self._tables < room else []
            self._tables += len(listed)
        else:
            listed = rows[:room].tolist()
        self.total += (1 if rows is None else len(rows)) if count is None else count
        self._pending += [{"row": row, "column": column, "message": message, "allowed": allowed}
                          for row in listed]

    def flag(self, mask: np.ndarray, rows: "BatchRows", column: str, message: str,
             allowed: str) -> None:
        """The rows of a batch where ``mask`` holds break one rule."""
        count = int(np.count_nonzero(mask))
        if count:
            room = self.cap - len(self.items)
            self.add(message, allowed, column=column, count=count,
                     rows=rows.numbers(np.flatnonzero(mask)[:room]))

    def flush(self) -> None:
        """Keep the pending errors, in row order, while there is room (at batch ends)."""
        self._pending.sort(key=lambda item: item["row"] or 0)
        self.items += self._pending[: self.cap - len(self.items)]
        self._pending, self._tables = [], 0

    @property
    def listed_all(self) -> bool:
        """Every error there is, listed: complete, and none left out for the cap."""
        return self.complete and len(self.items) == self.total

    def __bool__(self) -> bool:
        return self.total > 0


@dataclass
class BatchRows:
    """Where a batch sits in the file: its first kept row, and the rows dropped before."""

    first: int  # kept rows before this batch
    skipped: Sequence[int] = field(default_factory=list)  # dropped data rows, ascending

    def numbers(self, positions: np.ndarray) -> np.ndarray:
        """1-based data rows of the batch's positions, counting the dropped rows too."""
        kept = self.first + 1 + np.asarray(positions, dtype=np.int64)
        if not self.skipped:
            return kept
        skipped = np.asarray(self.skipped, dtype=np.int64)
        before = skipped - np.arange(len(skipped))
        return kept + np.searchsorted(before, kept, side="right")
