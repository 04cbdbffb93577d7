"""Each band's rows estimated apart from the band's own noisy cells: what decides whether its
precision is shown.

Why: a band's precision is positives / rows of the band's noisy cells. Showing it only when
those same noisy rows clear a floor shows it exactly when the noise inflated them, and the
positives carry half of that noise (rows = positives + negatives, each with its own noise), so
the figures shown lean towards 1/2: the high band of a 22% outcome (about 50 rows against a
noise std of 27 on their count) read 0.05 low on 500 rows at epsilon 1 (bench/coverage.py). A
decision on a count whose noise is independent of the band's cells cannot lean the figures it
shows; what is left is the ratio's own small-sample bias.

Two such counts, both post-processing of the same release and of public facts:

- the whole part: its public row count (row counts are public by convention) less the noisy rows
  outside the band; failing that (no public count), the band's rows summed over the groups of a
  grouping, whose histograms carry their own noise. Where patients were left out, the public
  count exceeds the rows counted by that many, so the estimate reads the band as larger by them
  (never read from the counts, which would release it);
- a group: the whole part's band rows less the other groups' band rows of its grouping.
"""

from app.bands import BANDS
from worker.histogram_metrics import Stats

VIEWS = ("exactly", "at_or_above")
ROWS_KEYS = tuple(f"bands.{band.value}.{view}.rows" for band in BANDS for view in VIEWS)
"""The keys of each band view's noisy rows in ``worker.histogram_metrics.released_summary``."""


def of_whole_part(stats: Stats, *, public_rows: int | None, grouping: Stats | None) -> Stats:
    """Each band view's rows for the whole part, apart from its own cells; empty when neither a
    public row count nor a grouping is there (the caller then has only the band's own count).

    Args:
        stats: the whole part's released figures (``rows`` and each of ``ROWS_KEYS``).
        public_rows: the part's public size, or None.
        grouping: one grouping's released figures (first axis its groups), or None.
    """
    if public_rows is not None:
        return {key: public_rows - (stats["rows"] - stats[key]) for key in ROWS_KEYS}
    if grouping is not None:
        return {key: grouping[key].sum(axis=0) for key in ROWS_KEYS}
    return {}


def of_groups(whole: Stats, grouping: Stats) -> Stats:
    """Each group's band view rows (first axis its groups), apart from its own cells: the whole
    part's less the grouping's other groups'."""
    return {key: whole[key] - (grouping[key].sum(axis=0) - grouping[key]) for key in ROWS_KEYS}
