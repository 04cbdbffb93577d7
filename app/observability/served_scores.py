"""Served-score drift metrics: which bands, and which probabilities, this process has answered.

Why: a model whose inputs drift (a new clinic, a changed intake form) shows it first in the mix
of bands it serves, long before a labelled follow-up can say whether it is still calibrated.
Prometheus compares the last hour's mix with the last week's (``deploy/prometheus/
dpcrisis-alerts.yml``) and asks for a monitoring run when it moves.

- ``dpcrisis_served_band_total{model_id, band}``: each patient answer counts once in its band (a
  batch counts each patient), whichever path served it: JSON, FHIR or a CDS Hooks call (a
  patient scored below the card's minimum band included: the EHR's display choice must not
  look like drift; a refused call or an insufficient-data card counts nothing); all three
  bands (``app.bands.BANDS``) are present for a model once it has served anything, so a share
  is never a ratio of missing series.
- ``dpcrisis_served_score{model_id}``: a histogram of the served probabilities on
  ``SCORE_BUCKETS``.

What these are: counts of the service's own answers to scoring requests (operational), not a
statistic of any training or follow-up table; the release inventory says so. Labels are model ids
(integers) and band names only: nothing from a request body, no patient id.

Why a custom collector and not ``prometheus_client.Histogram``: the client has no batched
observe, and 10,000 ``observe()`` calls per batch would cost milliseconds under its lock. Here a
batch is one ``searchsorted`` + ``bincount`` and one short locked add of a few integers.
The counts are this process's (like the job histograms): Prometheus sums them over processes,
and ``increase()`` absorbs a restart's reset.
"""

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.bands import BANDS

SCORE_BUCKETS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 0.9)
"""Upper bounds (inclusive, Prometheus ``le``) of the served-probability buckets, then +Inf.

Public: constants fixed in code, chosen before any data (fine where rare outcomes sit, around
the default cut-offs 0.05 and 0.20, coarse above), never fitted to scores or to a table."""

_EDGES = np.asarray(SCORE_BUCKETS, dtype=np.float64)
_LE = [floatToGoString(b) for b in SCORE_BUCKETS] + ["+Inf"]
_BAND_NAMES = tuple(str(b) for b in BANDS)


@dataclass
class _Served:
    """One model's counts: per band (``BANDS`` order), per bucket (not cumulative), sum."""

    bands: np.ndarray = field(default_factory=lambda: np.zeros(len(BANDS), dtype=np.int64))
    buckets: np.ndarray = field(
        default_factory=lambda: np.zeros(len(SCORE_BUCKETS) + 1, dtype=np.int64))
    total: float = 0.0


def _band_counts(bands: Sequence[str] | np.ndarray, n: int) -> np.ndarray:
    """Answers per band, in ``BANDS`` order, from band names or band indices."""
    if isinstance(bands, np.ndarray) and np.issubdtype(bands.dtype, np.integer):
        if bands.shape != (n,) or (n and (bands.min() < 0 or bands.max() >= len(BANDS))):
            raise ValueError(f"expected {n} band indices in [0, {len(BANDS)})")
        return np.bincount(bands, minlength=len(BANDS)).astype(np.int64)
    if len(bands) != n:
        raise ValueError(f"{len(bands)} bands for {n} probabilities")
    counted = Counter(bands)  # Band members hash as their values ("low", ...)
    unknown = set(counted) - set(_BAND_NAMES)
    if unknown:
        raise ValueError(f"unknown band(s) {sorted(map(str, unknown))}")
    return np.asarray([counted.get(name, 0) for name in _BAND_NAMES], dtype=np.int64)


class ServedScores(Collector):
    """Per-model band counts and score histograms of the answers this process served."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[int, _Served] = {}

    def record(self, model_id: int, probabilities: np.ndarray | Sequence[float],
               bands: Sequence[str] | np.ndarray) -> None:
        """Count one answer's patients (one call per answer, a batch included).

        Args:
            model_id: the model that scored them.
            probabilities: each patient's served probability, in [0, 1].
            bands: each patient's served band: names (``Band`` members or their values), or
                an integer array of band indices (``app.bands.band_index``: 0 low .. 2 high).

        Raises:
            ValueError: bands and probabilities differ in length, or a band is unknown.
        """
        p = np.asarray(probabilities, dtype=np.float64).ravel()
        band_counts = _band_counts(bands, p.size)
        # side="left": a probability equal to a bound falls in that bound's bucket (le).
        bucket_counts = np.bincount(np.searchsorted(_EDGES, p, side="left"),
                                    minlength=len(_LE))
        total = float(p.sum())
        with self._lock:
            served = self._models.setdefault(int(model_id), _Served())
            served.bands += band_counts
            served.buckets += bucket_counts
            served.total += total

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot = {m: (s.bands.copy(), s.buckets.cumsum(), s.total)
                        for m, s in sorted(self._models.items())}
        bands = CounterMetricFamily(
            "dpcrisis_served_band",
            "Patient answers served, by scoring model and risk band (a batch counts each "
            "patient); counts of the service's own answers, not of any table.",
            labels=["model_id", "band"],
        )
        scores = HistogramMetricFamily(
            "dpcrisis_served_score",
            "Served probabilities by scoring model, on public bins fixed in code.",
            labels=["model_id"],
        )
        for model_id, (counts, cumulative, total) in snapshot.items():
            label = str(model_id)
            for name, count in zip(_BAND_NAMES, counts.tolist(), strict=True):
                bands.add_metric([label, name], count)
            scores.add_metric([label], list(zip(_LE, cumulative.tolist(), strict=True)),
                              sum_value=total)
        yield bands
        yield scores


SERVED = ServedScores()
"""This process's counts: every app's ``/metrics`` registry includes it."""


def record(model_id: int, probabilities: np.ndarray | Sequence[float],
           bands: Sequence[str] | np.ndarray) -> None:
    """Count one answer in this process's served-score series (``ServedScores.record``)."""
    SERVED.record(model_id, probabilities, bands)
