"""A model trained on a clinic's own (non-crisis) schema, for the FHIR and CDS Hooks tests.

The schema has a feature coded in LOINC (age 30525-0, so CDS Hooks takes it from
Patient.birthDate), the PHQ-9 total in LOINC, a categorical and a yes/no feature coded in the
clinic's own code system, and ``sleep_hours``, which has no code unless ``sleep_coded``.
With ``imputed``, the PHQ-9 and sleep are declared ``"missing": "reference"`` and about one row
in six of each is empty in the uploaded table (imputed with the reference at ingestion).
"""

import copy
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from tests.declared_upload import train_declared

CLINIC = "https://clinic.example/fhir/CodeSystem/intake"
LIVING = ["alone", "family", "supported housing"]
SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "age", "label": "Age", "kind": "integer", "lower": 18, "upper": 90,
         "reference": 40, "unit": "years",
         "code": {"system": "http://loinc.org", "code": "30525-0", "display": "Age"}},
        {"name": "phq9", "label": "PHQ-9", "kind": "integer", "lower": 0, "upper": 27,
         "reference": 5,
         "code": {"system": "http://loinc.org", "code": "44261-6", "display": "PHQ-9 total"}},
        {"name": "living", "label": "Living situation", "kind": "categorical",
         "categories": LIVING, "reference": "family",
         "code": {"system": CLINIC, "code": "living-situation"}},
        {"name": "sleep_hours", "label": "Sleep", "kind": "numeric", "lower": 0, "upper": 24,
         "reference": 7.5, "unit": "hours a night"},
        {"name": "prior_crisis", "label": "Prior crisis", "kind": "binary", "reference": 0,
         "code": {"system": CLINIC, "code": "prior-crisis", "display": "Prior crisis"}},
    ],
    "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days", "positive": 1,
                "bands": {"low_medium": 0.25, "medium_high": 0.6}},  # ~42% prevalence
    "id_column": "patient_id",
}
PATIENT = {"age": 52, "phq9": 19, "living": "alone", "sleep_hours": 4.5, "prior_crisis": 1}
SLEEP_CODE = {"system": CLINIC, "code": "sleep-hours", "display": "Hours of sleep"}
IMPUTED = ("phq9", "sleep_hours")
"""The features ``imputed`` declares ``"missing": "reference"``."""


def schema(*, sleep_coded: bool = False, imputed: bool = False) -> dict[str, Any]:
    declared = copy.deepcopy(SCHEMA)
    if sleep_coded:
        declared["features"][3]["code"] = SLEEP_CODE
    if imputed:
        for feature in declared["features"]:
            if feature["name"] in IMPUTED:
                feature["missing"] = "reference"
    return declared


def _with_gaps(values: np.ndarray, rng: np.random.Generator) -> pa.Array:
    """``values`` with about one in six empty."""
    return pa.array(values, mask=rng.random(len(values)) < 1 / 6)


def _parquet(n: int, seed: int, *, gaps: bool = False) -> bytes:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 91, n)
    phq9 = rng.integers(0, 28, n)
    living = rng.integers(0, 3, n)
    sleep = np.round(rng.uniform(2, 11, n), 1)
    prior = rng.integers(0, 2, n)
    logit = -3.0 + 0.12 * phq9 + 0.9 * (living == 0) - 0.2 * (sleep - 7) + 1.1 * prior
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table({"patient_id": [f"c{seed}-{i}" for i in range(n)], "age": age,
                      "phq9": _with_gaps(phq9, rng) if gaps else phq9,
                      "living": [LIVING[k] for k in living],
                      "sleep_hours": _with_gaps(sleep, rng) if gaps else sleep,
                      "prior_crisis": prior, "crisis_30d": y})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def train_clinic_model(client: TestClient, run_worker: Any, *, sleep_coded: bool = False,
                       seed: int = 0, imputed: bool = False) -> int:
    """Register an upload dataset with the clinic's schema, train on it, activate the model;
    its id."""
    return train_declared(client, run_worker, name=f"clinic-{seed}",
                          schema=schema(sleep_coded=sleep_coded, imputed=imputed),
                          table=_parquet(3000, seed, gaps=imputed)).model_id
