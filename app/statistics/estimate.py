"""From noisy vectors to answers: values, standard errors and 95% intervals (post-processing).

Counts, sums and histogram counts are the noisy values themselves, unbiased; their standard
error is the noise's (Gaussian: its standard deviation; Laplace: sqrt(2) b) and their interval
is exact for the known noise distribution (Gaussian: +- 1.96 sd; Laplace: +- b ln 20). A
noisy count may be negative: it is reported as drawn, so that averages of releases stay
unbiased.

Ratios (``mean``, ``prevalence``) are estimated from two noisy vectors and clipped to their
range; their standard error is the delta method's at the noisy values, capped at half the
range, and their interval is the normal one, clipped to the range. That approximation is good
when the noisy count is large against its noise and poor for (nearly) empty groups, whose
interval then covers most of the range. All of it is computed from the noisy vectors and public
parameters alone, so it is covered by the release's guarantee. Each query kind's estimator is
its own (``app.statistics.queries``); the shared cells and intervals are here.
"""

import itertools
from typing import Any

import numpy as np

from app.statistics.noise import Z95, Noise
from app.statistics.shapes import Axis, QueryPlan


def _groups(axes: tuple[Axis, ...]) -> list[dict[str, str]]:
    """Each cell's group, row-major over ``axes`` (one empty group when ungrouped)."""
    names = [a.column.name for a in axes]
    return [dict(zip(names, labels, strict=True))
            for labels in itertools.product(*(a.labels for a in axes))]


def _cell(group: dict[str, str], bin_label: str | None, value: float, se: float,
          low: float, high: float) -> dict[str, Any]:
    return {"group": group, "bin": bin_label, "value": float(value),
            "standard_error": float(se), "ci95": [float(low), float(high)]}


def direct(plan: QueryPlan, noise: Noise, noisy: np.ndarray) -> list[dict[str, Any]]:
    """Counts, sums, histogram counts: the noisy value, the noise's exact interval."""
    bins: list[str | None] = list(plan.bins.labels) if plan.bins else [None]
    se, half = noise.standard_error, noise.half_width95
    cells, values = [], iter(noisy)
    for group in _groups(plan.groups):
        for label in bins:
            value = next(values)
            cells.append(_cell(group, label, value, se, value - half, value + half))
    return cells


def ratio_cells(plan: QueryPlan, estimates: np.ndarray, errors: np.ndarray,
                 bounds: tuple[float, float]) -> list[dict[str, Any]]:
    low, high = bounds
    return [_cell(group, None, value, se, max(value - Z95 * se, low), min(value + Z95 * se, high))
            for group, value, se in zip(_groups(plan.groups), estimates, errors, strict=True)]


def _noise_view(noise: Noise) -> dict[str, Any]:
    unit = noise.mechanism.unit
    return {"of": noise.vector.of, "cells": noise.vector.cells,
            "distribution": noise.distribution, "scale": noise.scale,
            "sensitivity": noise.vector.sensitivity, "norm": noise.mechanism.norm,
            "rho": noise.privacy if unit == "rho" else None,
            "epsilon": noise.privacy if unit == "epsilon" else None, "sampler": noise.sampler}


def answer(plan: QueryPlan, noises: list[Noise], cells: list[dict[str, Any]], estimator: str
           ) -> dict[str, Any]:
    """One query's answer as stored and served (``AnswerOut``), from its kind's ``cells``."""
    query = plan.query
    return {
        "index": plan.index, "kind": str(query.kind), "feature": query.feature,
        "bins": list(plan.bins.edges) if plan.bins and plan.bins.edges else None,
        "by": [item if isinstance(item, str) else item.model_dump(mode="json")
               for item in query.by],
        "share": plan.share, "estimator": estimator,
        "noise": [_noise_view(n) for n in noises],
        "cells": cells,
    }
