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
parameters alone, so it is covered by the release's guarantee.
"""

import itertools
from typing import Any

import numpy as np

from app.statistics.noise import Z95, Noise
from app.statistics.plan import Axis, QueryPlan
from app.statistics.schemas import QueryKind

ESTIMATORS = {
    QueryKind.COUNT: "noisy count per cell",
    QueryKind.SUM: "noisy sum per cell of the values clipped to the declared bounds",
    QueryKind.MEAN: "midpoint + noisy sum of (value - midpoint) / noisy count, clipped to the "
                    "declared bounds (values clipped first); delta-method standard error",
    QueryKind.HISTOGRAM: "noisy count per cell and bin",
    QueryKind.PREVALENCE: "noisy events / (noisy events + noisy non-events), clipped to "
                          "[0, 1]; delta-method standard error",
}


def _groups(axes: tuple[Axis, ...]) -> list[dict[str, str]]:
    """Each cell's group, row-major over ``axes`` (one empty group when ungrouped)."""
    names = [a.column.name for a in axes]
    return [dict(zip(names, labels, strict=True))
            for labels in itertools.product(*(a.labels for a in axes))]


def _cell(group: dict[str, str], bin_label: str | None, value: float, se: float,
          low: float, high: float) -> dict[str, Any]:
    return {"group": group, "bin": bin_label, "value": float(value),
            "standard_error": float(se), "ci95": [float(low), float(high)]}


def _direct(plan: QueryPlan, noise: Noise, noisy: np.ndarray) -> list[dict[str, Any]]:
    """Counts, sums, histogram counts: the noisy value, the noise's exact interval."""
    bins: list[str | None] = list(plan.bins.labels) if plan.bins else [None]
    se, half = noise.standard_error, noise.half_width95
    cells, values = [], iter(noisy)
    for group in _groups(plan.groups):
        for label in bins:
            value = next(values)
            cells.append(_cell(group, label, value, se, value - half, value + half))
    return cells


def _ratio_cells(plan: QueryPlan, estimates: np.ndarray, errors: np.ndarray,
                 bounds: tuple[float, float]) -> list[dict[str, Any]]:
    low, high = bounds
    return [_cell(group, None, value, se, max(value - Z95 * se, low), min(value + Z95 * se, high))
            for group, value, se in zip(_groups(plan.groups), estimates, errors, strict=True)]


def _mean(plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]
          ) -> list[dict[str, Any]]:
    assert plan.column is not None
    lower, upper = plan.column.lower, plan.column.upper
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    counts, sums = np.maximum(noisy[0], 1.0), noisy[1]
    shifted = np.clip(sums / counts, -half, half)
    variance = (noises[1].standard_error**2 + shifted**2 * noises[0].standard_error**2) / counts**2
    errors = np.minimum(np.sqrt(variance), half)
    return _ratio_cells(plan, mid + shifted, errors, (lower, upper))


def _prevalence(plan: QueryPlan, noise: Noise, noisy: np.ndarray) -> list[dict[str, Any]]:
    size = plan.group_cells
    events, others = noisy[:size], noisy[size:]
    counts = np.maximum(events + others, 1.0)
    share = np.clip(events / counts, 0.0, 1.0)
    variance = noise.standard_error**2 * ((1 - share) ** 2 + share**2) / counts**2
    errors = np.minimum(np.sqrt(variance), 0.5)
    return _ratio_cells(plan, share, errors, (0.0, 1.0))


def cells(plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]) -> list[dict[str, Any]]:
    """The answer's cells, in the plan's row-major order."""
    kind = plan.query.kind
    if kind is QueryKind.MEAN:
        return _mean(plan, noises, noisy)
    if kind is QueryKind.PREVALENCE:
        return _prevalence(plan, noises[0], noisy[0])
    return _direct(plan, noises[0], noisy[0])


def _noise_view(noise: Noise) -> dict[str, Any]:
    unit = noise.mechanism.unit
    return {"of": noise.vector.of, "cells": noise.vector.cells,
            "distribution": noise.distribution, "scale": noise.scale,
            "sensitivity": noise.vector.sensitivity, "norm": noise.mechanism.norm,
            "rho": noise.privacy if unit == "rho" else None,
            "epsilon": noise.privacy if unit == "epsilon" else None, "sampler": noise.sampler}


def answer(plan: QueryPlan, noises: list[Noise], noisy: list[np.ndarray]) -> dict[str, Any]:
    """One query's answer as stored and served (``AnswerOut``)."""
    query = plan.query
    return {
        "index": plan.index, "kind": str(query.kind), "feature": query.feature,
        "bins": list(plan.bins.edges) if plan.bins and plan.bins.edges else None,
        "by": [item if isinstance(item, str) else item.model_dump(mode="json")
               for item in query.by],
        "share": plan.share, "estimator": ESTIMATORS[query.kind],
        "noise": [_noise_view(n) for n in noises],
        "cells": cells(plan, noises, noisy),
    }
