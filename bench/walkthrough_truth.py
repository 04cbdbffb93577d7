"""The walk-through's table and truths: ``bench/walkthrough.py`` reports, this computes what holds.

The table is statsmodels' RAND Health Insurance Experiment (``bench.public_tables.randhie``:
outcome "any outpatient visit in the year"). It has no missing values, so a stated fraction of
one numeric column is blanked (MCAR, seeded) and that feature declared
``"missing": "reference"``; the truths see the column as the service does, blanks at the
feature's reference value. Distances use the service's own public bins
(``app.monitoring.bins``) and PSI's floor of half a count per histogram spread over the bins,
as ``worker.monitoring.drift`` estimates them, so reported and true figures measure one thing.
"""

import csv
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind
from app.monitoring.bins import bins_of
from bench.public_tables import randhie

ID_COLUMN = "patient_id"
BLANKED = "chronic_diseases"
SHIFTED = "log_incentive"
PSI_FLOOR_COUNTS = 0.5
"""Half a count per histogram, spread over its bins: the service's PSI floor."""


@dataclass(frozen=True)
class Parts:
    """The rows split four ways, each (x, y, ids): x has NaN where a value was blanked."""

    schema: dict[str, Any]
    names: list[str]
    outcome: str
    upload: tuple[np.ndarray, np.ndarray, np.ndarray]
    held_back: tuple[np.ndarray, np.ndarray, np.ndarray]
    follow_up: tuple[np.ndarray, np.ndarray, np.ndarray]
    shifted: tuple[np.ndarray, np.ndarray, np.ndarray]
    blanked: int
    shift: float


def prepare(rows: int | None, seed: int, blank: float, shift: float) -> Parts:
    """Sample ``rows`` rows, blank ``blank`` of BLANKED (MCAR), split 50/20/15/15 and shift
    SHIFTED by ``shift`` (clipped to its declared bounds) in the last part."""
    proxy = randhie()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(proxy.y))[: rows or len(proxy.y)]
    x, y = proxy.x[order].copy(), proxy.y[order].copy()
    ids = np.array([f"rand-{i}" for i in order])
    schema = proxy.schema.model_dump(mode="json", by_alias=True, exclude_none=True)
    schema["id_column"] = ID_COLUMN
    names = [f["name"] for f in schema["features"]]
    column = names.index(BLANKED)
    holes = rng.random(len(y)) < blank
    x[holes, column] = np.nan
    for feature in schema["features"]:
        if feature["name"] == BLANKED:
            feature["missing"] = "reference"
    n = len(y)
    cuts = [int(n * 0.5), int(n * 0.7), int(n * 0.85)]
    pieces = np.split(np.arange(n), cuts)
    shifted_x = x[pieces[3]].copy()
    s = names.index(SHIFTED)
    lower, upper = schema["features"][s]["lower"], schema["features"][s]["upper"]
    shifted_x[:, s] = np.clip(shifted_x[:, s] + shift, lower, upper)
    part = [(x[p], y[p], ids[p]) for p in pieces]
    return Parts(schema, names, schema["outcome"]["name"], part[0], part[1], part[2],
                 (shifted_x, y[pieces[3]], ids[pieces[3]]), int(holes.sum()), shift)


def _kinds(parts: Parts) -> list[str]:
    return [f["kind"] for f in parts.schema["features"]]


def _cell(value: float, kind: str) -> Any:
    if np.isnan(value):
        return None
    return int(round(value)) if kind in ("binary", "integer") else float(value)


def to_csv(parts: Parts, x: np.ndarray, y: np.ndarray, ids: np.ndarray) -> bytes:
    """A CSV of the rows: a blank cell where a value was blanked."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([ID_COLUMN, *parts.names, parts.outcome])
    kinds = _kinds(parts)
    for row, label, patient in zip(x, y, ids, strict=True):
        cells = [_cell(v, k) for v, k in zip(row, kinds, strict=True)]
        writer.writerow([patient, *("" if c is None else c for c in cells), int(label)])
    return out.getvalue().encode()


def patients(parts: Parts, x: np.ndarray) -> list[dict[str, Any]]:
    """Batch-scoring patients: a blanked value is sent as null (the schema imputes it)."""
    kinds = _kinds(parts)
    return [{"id": f"p{i}", "features": {n: _cell(v, k) for n, v, k in
                                         zip(parts.names, row, kinds, strict=True)}}
            for i, row in enumerate(x)]


def true_auc(y: np.ndarray, scores: np.ndarray) -> float:
    return float(roc_auc_score(y, scores))


def _imputed(parts: Parts, x: np.ndarray) -> np.ndarray:
    filled = x.copy()
    for j, feature in enumerate(parts.schema["features"]):
        filled[np.isnan(filled[:, j]), j] = feature["reference"]
    return filled


def _proportions(counts: np.ndarray, spread: float) -> np.ndarray:
    return (counts + spread / len(counts)) / (counts.sum() + spread)


def true_distances(parts: Parts, reference: np.ndarray, follow_up: np.ndarray
                   ) -> dict[str, tuple[float, float]]:
    """Per feature (PSI, Wasserstein-1) between two cohorts' columns on the service's bins."""
    schema = DatasetSchema.model_validate(parts.schema)
    ref, fup = _imputed(parts, reference), _imputed(parts, follow_up)
    found = {}
    for j, feature in enumerate(schema.features):
        bins = bins_of(feature)
        if feature.kind is FeatureKind.CATEGORICAL:
            raise ValueError("the walk-through's table has no categorical feature")
        c_r = np.bincount(bins.codes(ref[:, j]), minlength=bins.n_bins).astype(float)
        c_f = np.bincount(bins.codes(fup[:, j]), minlength=bins.n_bins).astype(float)
        p_r, p_f = _proportions(c_r, PSI_FLOOR_COUNTS), _proportions(c_f, PSI_FLOOR_COUNTS)
        psi = float(((p_f - p_r) * np.log(p_f / p_r)).sum())
        gap = np.cumsum(c_f / c_f.sum() - c_r / c_r.sum())[:-1]
        w1 = float((np.abs(gap) * np.diff(np.asarray(bins.centres))).sum())
        found[feature.name] = (psi, w1)
    return found
