"""Own-schema cohorts for the end-to-end tests: a real public table, a synthetic one, a server.

``live_server`` starts one ``dpcrisis serve`` (SQLite, embedded worker, uploads under the test's
own data directory) and hands out its URL and admin key, so the API test and a later browser
test can share one running service.

The real table is scikit-learn's copy of the Wisconsin Diagnostic Breast Cancer data (WDBC,
569 fine-needle aspirates, 30 nuclear features: mean, standard error and "worst" of ten
measurements of the nuclei in a digitised image). scikit-learn ships it without the specimen
ids of the UCI file, so each row gets ``wdbc-<row>``: stable, because the file never changes.
"""

import csv
import io
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.processes import (
    ADMIN_KEY,
    api_client,
    server_log,
    start_server,
    stop,
    wait_ready,
)

CSV, PARQUET = "text/csv", "application/vnd.apache.parquet"
BUDGET = {"epsilon": 8, "delta": 1e-5}


@dataclass(frozen=True)
class LiveServer:
    """A running ``dpcrisis serve``: its base URL and an admin key (for a browser's key field)."""

    url: str
    admin_key: str
    root: Path
    process: subprocess.Popen[str]

    def client(self, timeout: float = 60) -> httpx.Client:
        return api_client(self.url, key=self.admin_key, timeout=timeout)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One served process per test module; its uploads, database and artifacts under a tmp dir
    (``service_env``)."""
    root = tmp_path_factory.mktemp("cohort")
    process, base = start_server(root)
    try:
        wait_ready(process, base)
        yield LiveServer(url=base, admin_key=ADMIN_KEY, root=root, process=process)
    finally:
        stop(process)


# --- the breast cancer table (CSV) ---------------------------------------------------------

# Public bounds, declared from what each measurement is, never from the 569 rows:
# - radius: a round cap of 50 in the image's units (the cap itself is the declaration);
#   perimeter [0, 400] covers a circle of that radius (2 pi 50 = 314) with room for ragged
#   contours; area [0, 8000] covers pi 50^2 = 7854;
# - texture is the standard deviation of 8-bit grey levels: at most 255 / 2, so [0, 128];
# - smoothness, concave points and symmetry are fractions: [0, 1]; compactness and concavity
#   are ratios that exceed 1 only for very irregular nuclei: a round cap of 2;
# - fractal dimension is a coastline dimension minus 1, and a plane curve's lies in [1, 2]:
#   [0, 1];
# - "worst" (the mean of the three largest nuclei) has the per-nucleus range; a standard error
#   of values in [0, U] is at most their standard deviation, at most U / 2: [0, U / 2].
# The reference patient is the lower end of every range (0): a baseline that needs no data.
_MEASURES = {
    "radius": 50, "texture": 128, "perimeter": 400, "area": 8000, "smoothness": 1,
    "compactness": 2, "concavity": 2, "concave_points": 1, "symmetry": 1,
    "fractal_dimension": 1,
}
_STATISTICS = {"mean": "mean {}", "error": "{} error", "worst": "worst {}"}
"""Our column prefix -> scikit-learn's feature-name pattern."""


def breast_cancer_columns() -> list[tuple[str, str, float]]:
    """(our column, scikit-learn's feature name, public upper bound), in scikit-learn's order."""
    columns = []
    for statistic, pattern in _STATISTICS.items():
        for measure, upper in _MEASURES.items():
            sk_name = pattern.format(measure.replace("_", " "))
            columns.append((f"{statistic}_{measure}", sk_name,
                            upper / 2 if statistic == "error" else upper))
    return columns


def breast_cancer_schema() -> dict[str, Any]:
    features = [
        {"name": name, "label": sk_name.capitalize(), "kind": "numeric",
         "lower": 0, "upper": upper, "reference": 0}
        for name, sk_name, upper in breast_cancer_columns()
    ]
    return {"features": features,
            "outcome": {"name": "malignant", "label": "Malignant (biopsy)", "positive": 1,
                        "bands": {"low_medium": 0.2, "medium_high": 0.5}},  # 37% malignant
            "id_column": "specimen_id"}


def breast_cancer_rows() -> tuple[list[str], list[list[Any]]]:
    """The header and rows: scikit-learn's target is 0 = malignant, so malignant = 1 - target.

    ``load_breast_cancer()`` without ``as_frame``: the arrays need no pandas.
    """
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    position = {str(name): i for i, name in enumerate(data.feature_names)}
    order = [position[sk_name] for _, sk_name, _ in breast_cancer_columns()]
    assert len(order) == 30 and list(data.target_names) == ["malignant", "benign"]
    header = ["specimen_id", *(name for name, _, _ in breast_cancer_columns()), "malignant"]
    rows = [[f"wdbc-{i:04d}", *(float(v) for v in data.data[i, order]), 1 - int(data.target[i])]
            for i in range(len(data.target))]
    return header, rows


def breast_cancer_csv() -> bytes:
    header, rows = breast_cancer_rows()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


# --- a synthetic clinic table with a categorical feature (Parquet) -------------------------

SITES = ["north", "south", "east"]
CLINIC_SCHEMA: dict[str, Any] = {
    "features": [
        {"name": "phq9", "label": "PHQ-9", "kind": "integer", "lower": 0, "upper": 27,
         "reference": 5, "unit": "points",
         "code": {"system": "http://loinc.org", "code": "44261-6", "display": "PHQ-9 total"}},
        {"name": "site", "label": "Site", "kind": "categorical", "categories": SITES,
         "reference": "north"},
        {"name": "sleep_hours", "label": "Sleep", "kind": "numeric", "lower": 0, "upper": 24,
         "model_upper": 14, "reference": 7.5, "unit": "h"},
        {"name": "prior_crisis", "label": "Prior crisis", "kind": "binary", "reference": 0},
    ],
    "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days", "positive": 1,
                "bands": {"low_medium": 0.25, "medium_high": 0.6}},  # ~45% prevalence
    "subgroups": ["site"],
    "id_column": "patient_id",
}


def clinic_parquet(n: int = 3000, seed: int = 11) -> bytes:
    rng = np.random.default_rng(seed)
    phq9 = rng.integers(0, 28, n)
    site = rng.integers(0, len(SITES), n)
    sleep = np.round(np.clip(rng.normal(7, 1.8, n), 0, 24), 1)
    prior = rng.integers(0, 2, n)
    logit = -3.0 + 0.15 * phq9 + 0.7 * (site == 1) - 0.2 * (sleep - 7) + 1.2 * prior
    outcome = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    table = pa.table({"patient_id": [f"c{seed}-{i}" for i in range(n)], "phq9": phq9,
                      "site": [SITES[s] for s in site], "sleep_hours": sleep,
                      "prior_crisis": prior, "crisis_30d": outcome})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# --- steps through the API -----------------------------------------------------------------

def register_upload(http: httpx.Client, name: str, schema: dict[str, Any], body: bytes,
                    media_type: str) -> dict[str, Any]:
    """Register an upload dataset (201, awaiting data), send its rows (200, ready)."""
    created = http.post("/v1/datasets", json={"name": name, "source": {"kind": "upload"},
                                              "schema": schema, "privacy_budget": BUDGET})
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "awaiting_data"
    sent = http.put(f"/v1/datasets/{created.json()['id']}/data", content=body,
                    headers={"Content-Type": media_type, "Prefer": "wait=60"})
    assert sent.status_code == 200, sent.text
    return sent.json()


def train(server: LiveServer, http: httpx.Client, dataset_id: int,
          seconds: float = 60) -> dict[str, Any]:
    """A default job (target epsilon 3) run by the embedded worker; returns its model."""
    job = http.post("/v1/jobs", json={"dataset_id": dataset_id,
                                      "privacy": {"target_epsilon": 3}})
    assert job.status_code == 202, job.text
    deadline = time.monotonic() + seconds
    while (state := http.get(job.headers["location"]).json())["status"] in ("queued",
                                                                              "running"):
        assert time.monotonic() < deadline, state
        assert server.process.poll() is None, server_log(server.process)
        time.sleep(0.1)
    assert state["status"] == "succeeded", state
    model = http.get(f"/v1/models/{state['model_id']}")
    assert model.status_code == 200, model.text
    return model.json()


def assert_additive(result: dict[str, Any], reference: dict[str, Any],
                    names: list[str]) -> None:
    """One contribution per schema feature; reference + contributions = the score.

    The model computes in float32: with 30 features the log-odds terms reach tens, so the sum
    is checked to float32's relative precision of their total size, not to a fixed 1e-6.
    """
    contributions = result["contributions"]
    assert sorted(c["feature"] for c in contributions) == sorted(names)
    total = reference["log_odds"] + sum(c["contribution"] for c in contributions)
    size = abs(reference["log_odds"]) + sum(abs(c["contribution"]) for c in contributions)
    assert total == pytest.approx(result["log_odds"], abs=1e-6 * max(1.0, size))
    total_p = reference["probability"] + sum(c["contribution_probability"]
                                             for c in contributions)
    assert total_p == pytest.approx(result["probability"], abs=1e-6)


def stored_tables(server: LiveServer) -> set[Path]:
    """The uploads the server keeps (named by their bytes; not the dot-named spools)."""
    data = server.root / "var" / "data"
    return {p for p in data.glob("*") if p.is_file() and not p.name.startswith(".")}
