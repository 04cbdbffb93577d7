"""The risk bands: their names, legacy default cut-offs, the cut-offs' rule, and which band a
probability falls in.

A probability p (of the model's declared outcome, on a 0-1 scale) is ``high`` from
``medium_high`` on, ``medium`` from ``low_medium`` up to ``medium_high``, and ``low`` below
``low_medium``: each cut-off belongs to the band above it. Scoring, the held-out evaluation, the
model registry, FHIR and CDS Hooks all read the rule here. Each model carries its own copy of
the cut-offs: its schema's declared ``outcome.bands`` when trained (``model_thresholds``),
changed with ``PUT /v1/models/{id}/band-thresholds``.
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol

import numpy as np

from app.core.errors import InvalidRequest


class Band(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


BANDS: tuple[Band, ...] = tuple(Band)
"""Lowest first: ``BANDS[i]`` is the band of ``band_index`` ``i``."""

LOW_MEDIUM, MEDIUM_HIGH = "low_medium", "medium_high"
"""The keys of a thresholds mapping, as each model stores it and the API sends it."""

DEFAULT_BAND_THRESHOLDS = {LOW_MEDIUM: 0.05, MEDIUM_HIGH: 0.20}
"""Legacy cut-offs, set for a rare outcome (~2% prevalence): medium from 2.5x, high from 10x the
base rate (0 < low_medium < medium_high < 1).

A model starts with its schema's declared ``outcome.bands``; only a schema stored before outcomes
declared bands falls back to these (the built-in crisis schema declares the same values).
"""


class DeclaredBands(Protocol):
    """A schema's ``outcome.bands`` (``app.datasets.schema.dataset_schema.OutcomeBands``)."""

    @property
    def low_medium(self) -> float: ...

    @property
    def medium_high(self) -> float: ...


def model_thresholds(declared: DeclaredBands | None) -> dict[str, float]:
    """The cut-offs a newly trained model starts with: its schema's declared ``outcome.bands``
    (public clinical policy), else, for a schema stored before outcomes declared bands,
    ``DEFAULT_BAND_THRESHOLDS``.

    The one rule for a new model's cut-offs: the worker's DP evaluation bins at them and the
    registered model stores this copy. A data scientist's override,
    ``PUT /v1/models/{id}/band-thresholds``, replaces the copy later and wins from then on.
    """
    if declared is None:
        return dict(DEFAULT_BAND_THRESHOLDS)
    return validate_thresholds({LOW_MEDIUM: declared.low_medium,
                                MEDIUM_HIGH: declared.medium_high})


def cut_offs(thresholds: Mapping[str, float]) -> tuple[float, float]:
    """(low_medium, medium_high): the probabilities from which a patient is medium, and high."""
    return thresholds[LOW_MEDIUM], thresholds[MEDIUM_HIGH]


def validate_thresholds(thresholds: Mapping[str, float]) -> dict[str, float]:
    """0 < low_medium < medium_high < 1 (probabilities of the model's declared outcome).

    Returns:
        The two cut-offs as floats, as a model stores them.

    Raises:
        InvalidRequest: a threshold is out of range or they are not in order (422).
    """
    low, high = float(thresholds[LOW_MEDIUM]), float(thresholds[MEDIUM_HIGH])
    if not 0.0 < low < 1.0:
        raise InvalidRequest("low_medium must lie in (0, 1)", field=LOW_MEDIUM, allowed="(0, 1)")
    if not low < high < 1.0:
        raise InvalidRequest(
            f"medium_high must lie above low_medium ({low:g}) and below 1",
            field=MEDIUM_HIGH,
            allowed=f"({low:g}, 1)",
        )
    return {LOW_MEDIUM: low, MEDIUM_HIGH: high}


def band_of(probability: float, thresholds: Mapping[str, float]) -> Band:
    """The band of one probability (each cut-off belongs to the band above it)."""
    low, high = cut_offs(thresholds)
    if probability >= high:
        return Band.HIGH
    if probability >= low:
        return Band.MEDIUM
    return Band.LOW


def band_index(probability: np.ndarray, thresholds: Mapping[str, float]) -> np.ndarray:
    """0 (low), 1 (medium) or 2 (high) per row: ``band_of`` on many probabilities at once."""
    low, high = cut_offs(thresholds)
    return (probability >= low).astype(np.int64) + (probability >= high)


def interval(band: Band, thresholds: Mapping[str, float]) -> tuple[float, float]:
    """(from, to) of a band's probabilities: ``from`` is in the band, ``to`` is not (but 1 is)."""
    low, high = cut_offs(thresholds)
    edges = (0.0, low, high, 1.0)
    i = BANDS.index(band)
    return edges[i], edges[i + 1]
