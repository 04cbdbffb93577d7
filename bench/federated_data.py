"""The federation bench's rows and scoring: the clinics' tables, their fresh held-out rows, the
pooled union as an upload, and the service's calibrated probabilities on public rows.

Seeds (no other dataset, test or bench uses them):

- the clinics' registered rows: ``CLINIC_SEEDS`` (a synthetic source at each clinic);
- each clinic's held-out rows: ``HELD_OUT_SEEDS``, fresh draws of the same generator with the
  clinic's shift, so they follow the clinic's distribution but no model trained on them.

The held-out rows are public synthetic rows, so exact AUC and log-loss on them are fine here
(the service's own evaluation is a DP release on each clinic's private held-out part).
"""

import csv
import io
from typing import Any

import httpx
import numpy as np
from sklearn.metrics import log_loss, roc_auc_score

from app.datasets import synthetic
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, SEX_CATEGORIES
from app.features import FEATURE_NAMES
from app.scoring.schemas import MAX_BATCH

CLINIC_SEEDS = {"clinic-a": 3_201, "clinic-b": 3_202, "clinic-c": 3_203}
HELD_OUT_SEEDS = {"clinic-a": 3_291, "clinic-b": 3_292, "clinic-c": 3_293}
ID_COLUMN = "pid"


def clinic_table(name: str, rows: int, shift: str | None) -> synthetic.SyntheticTable:
    """The rows the clinic's service generates from its synthetic source (same n, seed, shift)."""
    return synthetic.generate(rows, CLINIC_SEEDS[name], shift)


def held_out(name: str, shift: str | None, rows: int) -> synthetic.SyntheticTable:
    return synthetic.generate(rows, HELD_OUT_SEEDS[name], shift)


def pooled_schema() -> dict[str, Any]:
    """The generator's declared schema with an id column: an upload needs its patients' ids."""
    return {**BUILT_IN_SCHEMA.model_dump(mode="json", by_alias=True), "id_column": ID_COLUMN}


def union_csv(tables: dict[str, synthetic.SyntheticTable]) -> bytes:
    """Every clinic's rows as one CSV (ids ``<clinic>-<row>``): the pooled central dataset."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([ID_COLUMN, *FEATURE_NAMES, "sex", BUILT_IN_SCHEMA.outcome.name])
    for name, table in tables.items():
        for i in range(len(table.y)):
            writer.writerow([f"{name}-{i}", *(int(v) for v in table.x[i]),
                             SEX_CATEGORIES[table.sex[i]], int(table.y[i])])
    return out.getvalue().encode()


def _patients(x: np.ndarray) -> list[dict[str, Any]]:
    return [{"features": dict(zip(FEATURE_NAMES, (int(v) for v in row), strict=True))}
            for row in x]


def score(http: httpx.Client, model_id: int, x: np.ndarray) -> np.ndarray:
    """The service's calibrated probabilities for raw rows ``x`` (``/v1/risk/batch``, compact,
    in batches of the endpoint's maximum), in row order."""
    probabilities: list[float] = []
    for start in range(0, len(x), MAX_BATCH):
        answer = http.post("/v1/risk/batch", params={"view": "compact"}, json={
            "model_id": model_id, "patients": _patients(x[start:start + MAX_BATCH])})
        if answer.status_code != 200:
            raise SystemExit(f"scoring with model {model_id} failed: {answer.text[:500]}")
        probabilities += [float(r["probability"]) for r in answer.json()["results"]]
    return np.asarray(probabilities)


def metrics(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """(exact ROC-AUC, log-loss) on public rows."""
    clipped = np.clip(p, 1e-12, 1 - 1e-12)
    return float(roc_auc_score(y, p)), float(log_loss(y, clipped, labels=[0, 1]))
