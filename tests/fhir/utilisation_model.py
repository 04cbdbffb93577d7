"""A model of a clinic's own non-crisis outcome, for the FHIR and CDS Hooks wording tests.

The outcome: high service use (12 or more visits) in the
next year, about 10% of patients. Its horizon (365 days) and its code are declared only when a
test asks, so a test sees both an outcome with a window and one without. Every feature but
``visits`` has a code (age in LOINC, so CDS Hooks takes it from Patient.birthDate); ``visits``
has none unless ``visits_coded`` (without one, FHIR codes it in the schema's own local code
system and CDS Hooks cannot prefetch it).
No feature, label or code says anything of a crisis.
"""

import copy
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from tests.declared_upload import train_declared

CLINIC = "https://clinic.example/fhir/CodeSystem/utilisation"
HOUSING = ["own home", "rented", "supported housing"]
LABEL = "High service use in the next year"
OUTCOME_CODE = {"system": CLINIC, "code": "high-use-365d",
                "display": "12 or more visits within 365 days"}
HORIZON_DAYS = 365
SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "age", "label": "Age", "kind": "integer", "lower": 18, "upper": 100,
         "reference": 50, "unit": "years",
         "code": {"system": "http://loinc.org", "code": "30525-0", "display": "Age"}},
        {"name": "visits", "label": "Visits in the last year", "kind": "integer",
         "lower": 0, "upper": 60, "reference": 3},
        {"name": "housing", "label": "Housing", "kind": "categorical", "categories": HOUSING,
         "reference": "own home", "code": {"system": CLINIC, "code": "housing"}},
        {"name": "chronic", "label": "Chronic condition", "kind": "binary", "reference": 0,
         "code": {"system": CLINIC, "code": "chronic", "display": "Chronic condition"}},
    ],
    "outcome": {"name": "high_use", "label": LABEL, "positive": 1,
                "description": "Twelve or more outpatient visits in the year after the "
                               "assessment.",
                "bands": {"low_medium": 0.08, "medium_high": 0.2}},
    "id_column": "patient_id",
}
VISITS_CODE = {"system": CLINIC, "code": "visits", "display": "Visits in the last year"}
PATIENT = {"age": 71, "visits": 40, "housing": "supported housing", "chronic": 1}


def schema(*, horizon: bool = False, coded: bool = False,
           visits_coded: bool = False) -> dict[str, Any]:
    """The declaration; ``horizon``: with its 365-day window, ``coded``: with its code."""
    declared = copy.deepcopy(SCHEMA)
    if visits_coded:
        declared["features"][1]["code"] = VISITS_CODE
    if horizon:
        declared["outcome"]["horizon_days"] = HORIZON_DAYS
    if coded:
        declared["outcome"]["code"] = OUTCOME_CODE
    return declared


def _parquet(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 101, n)
    visits = rng.integers(0, 61, n)
    housing = rng.integers(0, 3, n)
    chronic = rng.integers(0, 2, n)
    logit = -5.0 + 0.05 * visits + 0.6 * (housing == 2) + 0.9 * chronic + 0.01 * (age - 50)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table({"patient_id": [f"u{seed}-{i}" for i in range(n)], "age": age,
                      "visits": visits, "housing": [HOUSING[k] for k in housing],
                      "chronic": chronic, "high_use": y})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def train_utilisation_model(client: TestClient, run_worker: Any, *, horizon: bool = False,
                            coded: bool = False, visits_coded: bool = False,
                            seed: int = 0) -> int:
    """Register an upload with the declaration, train on it, activate the model; its id."""
    return train_declared(
        client, run_worker, name=f"utilisation-{seed}",
        schema=schema(horizon=horizon, coded=coded, visits_coded=visits_coded),
        table=_parquet(3000, seed)).model_id
