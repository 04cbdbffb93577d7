"""Ingesting an uploaded table against a bare Arrow read of the same file (issue: uploads).

Setting: a 1,000,000-row, 10-column table (an id, eight features of every kind, the outcome)
written once as CSV and once as Parquet to a temporary directory. Each measurement runs in a
fresh process, so its peak RSS (``VmHWM``, interpreter and imports included; the RSS after the
imports is shown apart) is its own:

- bare read: ``pyarrow.csv.read_csv`` / ``pyarrow.parquet.read_table`` of the file (Arrow's
  multi-threaded reader, type inference, no checks): the baseline, measured in the same run;
- ingest: ``app.datasets.ingest.ingest_file``: streamed batches, every rule of the schema,
  duplicate ids, the order-insensitive fingerprint, the arrays;
- ingest + store: and ``table_store.store``, the content-addressed Parquet copy.

Goals: CSV ingest at most 3x the bare CSV read's seconds, and at most 1 GiB peak RSS.
Run: .venv/bin/python bench/ingest.py [--rows 1000000] [--repeat 3]
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import ingest, table_store  # noqa: E402
from app.datasets.dataset_schema import DatasetSchema  # noqa: E402

GOAL_RATIO, GOAL_PEAK_MB = 3.0, 1024.0
SCHEMA = DatasetSchema.model_validate({
    "features": [
        {"name": "age", "kind": "integer", "lower": 18, "upper": 80, "reference": 40},
        {"name": "phq9", "kind": "integer", "lower": 0, "upper": 27, "reference": 5},
        {"name": "gaf", "kind": "integer", "lower": 1, "upper": 100, "reference": 70},
        {"name": "num_sessions", "kind": "integer", "lower": 0, "upper": 50, "reference": 4,
         "model_upper": 15},
        {"name": "bmi", "kind": "numeric", "lower": 10, "upper": 80, "reference": 25},
        {"name": "sleep_hours", "kind": "numeric", "lower": 0, "upper": 24, "reference": 7.5},
        {"name": "prior_crisis", "kind": "binary", "reference": 0},
        {"name": "sex", "kind": "categorical", "categories": ["female", "male", "other"],
         "reference": "female"},
    ],
    "outcome": {"name": "crisis_30d"},
    "subgroups": ["sex"],
    "id_column": "patient_id",
})


def write_tables(n_rows: int, directory: Path) -> tuple[Path, Path]:
    """The same random table as CSV and as Parquet (seeded)."""
    rng = np.random.default_rng(0)
    table = pa.table({
        "patient_id": pa.array(np.char.add("pt-", np.arange(n_rows).astype(str))),
        "age": rng.integers(18, 81, n_rows),
        "phq9": rng.integers(0, 28, n_rows),
        "gaf": np.clip(np.rint(rng.normal(60, 15, n_rows)), 1, 100).astype(np.int64),
        "num_sessions": np.clip(rng.poisson(5.0, n_rows), 0, 50),
        "bmi": np.round(np.clip(rng.normal(26, 5, n_rows), 10, 80), 1),
        "sleep_hours": np.round(np.clip(rng.normal(7, 1.5, n_rows), 0, 24), 2),
        "prior_crisis": rng.binomial(1, 0.2, n_rows),
        "sex": pa.array(np.array(["female", "male", "other"])[rng.integers(0, 3, n_rows)]),
        "crisis_30d": rng.binomial(1, 0.05, n_rows),
    })
    csv_path, parquet_path = directory / "table.csv", directory / "table.parquet"
    pa_csv.write_csv(table, csv_path, pa_csv.WriteOptions(quoting_style="none"))
    pq.write_table(table, parquet_path)
    return csv_path, parquet_path


def _status_mb(key: str) -> float:
    """VmRSS / VmHWM of this process. Not ``ru_maxrss``: Linux carries that across fork and
    exec, so a child would report the parent's peak (the table generation)."""
    status = Path("/proc/self/status")
    if not status.exists():  # not Linux: the best available figure
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # bytes on macOS
    for line in status.read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{key} missing from {status}")


def measure(step: str, path: Path) -> dict[str, float]:
    """One step in this (fresh) process: seconds, peak RSS, RSS before the step."""
    media = ingest.PARQUET if path.suffix == ".parquet" else ingest.CSV
    base = _status_mb("VmRSS")
    start = time.perf_counter()
    if step == "read":
        if media == ingest.CSV:
            pa_csv.read_csv(path)
        else:
            pq.read_table(path)
    else:
        table = ingest.ingest_file(path, media_type=media, schema=SCHEMA)
        if step == "store":
            with tempfile.TemporaryDirectory() as data_dir:
                table_store.store(table, schema=SCHEMA, data_dir=Path(data_dir))
    return {"seconds": time.perf_counter() - start, "peak_mb": _status_mb("VmHWM"),
            "base_mb": base}


def run_in_child(step: str, path: Path, repeat: int) -> dict[str, float]:
    """Median over ``repeat`` fresh processes."""
    runs = []
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, __file__, "--measure", step, str(path)],
            capture_output=True, text=True, check=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


STEPS = (("read", "bare Arrow read"), ("ingest", "ingest"), ("store", "ingest + store"))


def compare(n_rows: int, repeat: int) -> dict[str, dict[str, dict[str, float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_tables(n_rows, Path(tmp))
        print(f"{n_rows:,} rows x 10 columns: CSV {paths[0].stat().st_size / 2**20:.0f} MiB, "
              f"Parquet {paths[1].stat().st_size / 2**20:.0f} MiB; median of {repeat} "
              "fresh processes each\n")
        print("| format | step | seconds | peak RSS (MiB) | RSS after imports | x bare read |")
        print("|---|---|---:|---:|---:|---:|")
        results: dict[str, dict[str, dict[str, float]]] = {}
        for path in paths:
            fmt = path.suffix.lstrip(".")
            results[fmt] = {step: run_in_child(step, path, repeat) for step, _ in STEPS}
            bare = results[fmt]["read"]["seconds"]
            for step, label in STEPS:
                r = results[fmt][step]
                print(f"| {fmt} | {label} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | "
                      f"{r['base_mb']:.0f} | {r['seconds'] / bare:.2f} |")
    return results


def report(results: dict[str, dict[str, dict[str, float]]]) -> None:
    csv_runs = results["csv"]
    ratio = csv_runs["ingest"]["seconds"] / csv_runs["read"]["seconds"]
    peak = max(run["peak_mb"] for runs in results.values() for run in runs.values())
    print(f"\n- CSV ingest / bare read = {ratio:.2f}x (goal <= {GOAL_RATIO:g}x): "
          f"{'met' if ratio <= GOAL_RATIO else 'NOT met'}")
    print(f"- highest peak RSS = {peak:.0f} MiB (goal <= {GOAL_PEAK_MB:.0f} MiB): "
          f"{'met' if peak <= GOAL_PEAK_MB else 'NOT met'}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per step")
    parser.add_argument("--measure", nargs=2, metavar=("STEP", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return
    report(compare(args.rows, args.repeat))


if __name__ == "__main__":
    main()
