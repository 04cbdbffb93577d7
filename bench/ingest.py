"""Ingesting an uploaded table against a bare Arrow read of the same file.

Setting: a 1,000,000-row, 10-column table (an id, eight features of every kind, the outcome)
written once as CSV and once as Parquet to a temporary directory. Each measurement runs in a
fresh process, so its peak RSS (``VmHWM``, interpreter and imports included; the RSS after the
imports is shown apart) is its own:

- bare read: ``pyarrow.csv.read_csv`` / ``pyarrow.parquet.read_table`` of the file (Arrow's
  multi-threaded reader, type inference, no checks): the baseline, measured in the same run;
- ingest: ``app.datasets.intake.ingest.ingest_file``: streamed batches, every rule of the schema,
  duplicate ids, the order-insensitive fingerprint, the arrays;
- ingest + store: ``app.datasets.intake.ingest.ingest_and_store`` (the upload route's path): the
same   checks keeping only row hashes and ids, then the file kept as sent, named by its SHA-256.

Goals: CSV ingest at most 3x the bare CSV read's seconds, and at most 1 GiB peak RSS.

``--http`` measures the same through the API (the uploads' own path): a real ``dpcrisis serve``
(temporary SQLite database and data directory, embedded worker) receives the CSV and a
Parquet table of other patients into the organisation's patient space (its per-patient delta
first lowered to 1/(10 n) through ``PUT /v1/patient-budget``, as an admin must before such an
upload; the same rows twice would be one source registered twice, a
409) as streamed ``PUT /v1/datasets/{id}/data`` bodies, ``--repeat`` times each with other rows
(median seconds, highest peak); each upload's wall seconds (first byte sent to answer
received) and the API process's peak RSS during it (``VmHWM``, reset through
``/proc/<pid>/clear_refs`` just before) are set against ``pyarrow.csv.read_csv`` and
``pandas.read_csv`` of the same file, each in a fresh process in the same run. Then a default
job (target epsilon 3) trains on the CSV's rows, and single-patient ``POST /v1/risk`` latency
(sequential, one keep-alive connection) is measured for that model and, interleaved, for a
default model of the built-in 8,000-row crisis dataset: the same server, the same run.
Goals there: upload in at most 3x the bare pyarrow read, at most 1 GiB peak RSS, scoring p99
at most 10 ms and unchanged against the crisis model.

Run: .venv/bin/python bench/ingest.py [--rows 1000000] [--repeat 3] [--http [--requests 500]]
(pandas is optional: without it the pandas baseline is reported as not installed.)
"""

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.intake import ingest  # noqa: E402
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind  # noqa: E402
from bench import processes, service  # noqa: E402
from bench.scoring_latency import cpu_seconds  # noqa: E402

GOAL_RATIO, GOAL_PEAK_MB = 3.0, 1024.0
SCHEMA_DOC: dict[str, Any] = {
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
    "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days",
                "bands": {"low_medium": 0.1, "medium_high": 0.25}},  # 5% in make_table
    "subgroups": ["sex"],
    "id_column": "patient_id",
}
SCHEMA = DatasetSchema.model_validate(SCHEMA_DOC)


def make_table(n_rows: int, seed: int = 0, prefix: str = "pt-") -> pa.Table:
    """A random table of ``SCHEMA`` (seeded; ``prefix`` keeps ids of two tables apart)."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "patient_id": pa.array(np.char.add(prefix, np.arange(n_rows).astype(str))),
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


def write_csv(table: pa.Table, path: Path) -> Path:
    pa_csv.write_csv(table, path, pa_csv.WriteOptions(quoting_style="none"))
    return path


def write_tables(n_rows: int, directory: Path) -> tuple[Path, Path]:
    """The same random table as CSV and as Parquet (seeded)."""
    table = make_table(n_rows)
    parquet_path = directory / "table.parquet"
    pq.write_table(table, parquet_path)
    return write_csv(table, directory / "table.csv"), parquet_path


def status_mb(key: str, pid: int | str = "self") -> float:
    """VmRSS / VmHWM of a process (Linux). Not ``ru_maxrss``: Linux carries that across fork
    and exec, so a child would report the parent's peak (the table generation)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():  # not Linux: the best available figure, for this process only
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # bytes on macOS
    for line in status.read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"{key} missing from {status}")


def measure(step: str, path: Path) -> dict[str, float]:
    """One step in this (fresh) process: seconds, peak RSS, RSS before the step."""
    media = ingest.PARQUET if path.suffix == ".parquet" else ingest.CSV
    base = status_mb("VmRSS")
    start = time.perf_counter()
    if step == "pandas":
        import pandas  # optional: only this baseline needs it

        pandas.read_csv(path)
    elif step == "read":
        if media == ingest.CSV:
            pa_csv.read_csv(path)
        else:
            pq.read_table(path)
    elif step == "store":  # the upload route's path: checked, then the file kept as sent
        with tempfile.TemporaryDirectory() as data_dir:
            ingest.ingest_and_store(path, media_type=media, schema=SCHEMA,
                                    data_dir=Path(data_dir)).commit()
    else:
        ingest.ingest_file(path, media_type=media, schema=SCHEMA)
    return {"seconds": time.perf_counter() - start, "peak_mb": status_mb("VmHWM"),
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


# --- through the API (--http) ---------------------------------------------------------------

P99_GOAL_MS, CHUNK_BYTES, TRAIN_TIMEOUT_S = 10.0, 1 << 20, 1800.0


def reset_peak(pid: int) -> bool:
    """Restart a process's ``VmHWM`` from its current RSS (Linux >= 4.0, same user)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def upload(http: httpx.Client, path: Path, *, pid: int, delta: float) -> dict[str, Any]:
    """Register an upload and stream ``path`` as its body: seconds, server peak RSS and CPU."""
    media = ingest.PARQUET if path.suffix == ".parquet" else ingest.CSV
    created = http.post("/v1/datasets", json={
        "name": f"bench-{path.name}", "source": {"kind": "upload"}, "schema": SCHEMA_DOC,
        "privacy_budget": {"epsilon": 8, "delta": delta}})
    created.raise_for_status()
    dataset_id = created.json()["id"]
    base, exact, cpu = status_mb("VmRSS", pid), reset_peak(pid), cpu_seconds(pid)
    start = time.perf_counter()
    with path.open("rb") as body:
        sent = http.put(f"/v1/datasets/{dataset_id}/data",
                        content=iter(lambda: body.read(CHUNK_BYTES), b""),
                        headers={"Content-Type": media, "Prefer": "wait=600"})  # chunked
    seconds = time.perf_counter() - start
    if sent.status_code != 200:
        raise SystemExit(f"upload of {path.name} refused: {sent.status_code} {sent.text[:500]}")
    return {"dataset_id": dataset_id, "seconds": seconds, "peak_mb": status_mb("VmHWM", pid),
            "base_mb": base, "exact_peak": exact, "cpu_s": cpu_seconds(pid) - cpu,
            "rows": sent.json()["rows"], "training_rows": sent.json()["training_rows"]}


def train(http: httpx.Client, dataset_id: int, pid: int) -> dict[str, Any]:
    """A default job (target epsilon 3) on the embedded worker: model id, seconds, peak RSS."""
    reset_peak(pid)
    start = time.perf_counter()
    job = http.post("/v1/jobs", json={"dataset_id": dataset_id,
                                      "privacy": {"target_epsilon": 3}})
    job.raise_for_status()
    while (state := http.get(job.headers["location"]).json())["status"] in ("queued",
                                                                              "running"):
        if time.perf_counter() - start > TRAIN_TIMEOUT_S:
            raise SystemExit(f"job still {state['status']} after {TRAIN_TIMEOUT_S:g} s")
        time.sleep(0.2)
    if state["status"] != "succeeded":
        raise SystemExit(f"training did not succeed: {state}")
    return {"model_id": int(state["model_id"]), "seconds": time.perf_counter() - start,
            "peak_mb": status_mb("VmHWM", pid)}


def random_patient(schema: DatasetSchema, rng: np.random.Generator) -> dict[str, Any]:
    """A patient drawn uniformly within the schema's public bounds (categories by name)."""
    patient: dict[str, Any] = {}
    for f in schema.features:
        lower, upper = f.bounds
        if f.kind is FeatureKind.CATEGORICAL:
            patient[f.name] = str(rng.choice(f.categories or []))
        elif f.kind is FeatureKind.NUMERIC:
            patient[f.name] = round(float(rng.uniform(lower, upper)), 2)
        else:
            patient[f.name] = int(rng.integers(int(lower), int(upper) + 1))
    return patient


def latencies(base: str, models: dict[int, DatasetSchema], n: int) -> dict[int, list[float]]:
    """``n`` sequential ``POST /v1/risk`` per model on one keep-alive connection, the models
    interleaved so that other load on the machine hits them alike; seconds per request."""
    rng = np.random.default_rng(3)
    host, port = base.removeprefix("http://").split(":")
    headers = {"content-type": "application/json", **service.AUTH}
    connection = HTTPConnection(host, int(port), timeout=30)
    times: dict[int, list[float]] = {model_id: [] for model_id in models}
    for k in range(20 + n):  # the first 20 warm up (model load, first requests)
        for model_id, schema in models.items():
            body = json.dumps({"features": random_patient(schema, rng), "model_id": model_id})
            start = time.perf_counter()
            connection.request("POST", "/v1/risk", body=body.encode(), headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"scoring answered {response.status}")
            if k >= 20:
                times[model_id].append(time.perf_counter() - start)
    connection.close()
    return times


def percentile_ms(values: list[float], q: float) -> float:
    ms = sorted(1000 * v for v in values)
    return ms[min(len(ms) - 1, int(q * len(ms)))]


def http_tables(n_rows: int, root: Path, name: str = "upload",
                seed: int = 0) -> tuple[Path, Path]:
    """The CSV, and a Parquet table of other patients (other seed and ids)."""
    parquet_path = root / f"{name}.parquet"
    pq.write_table(make_table(n_rows, seed=2 * seed + 1, prefix=f"{name}-pq-"), parquet_path)
    return (write_csv(make_table(n_rows, seed=2 * seed, prefix=f"{name}-"),
                      root / f"{name}.csv"), parquet_path)


def median_upload(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median seconds, with the highest peak RSS of all runs."""
    middle = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    return {**middle, "peak_mb": max(r["peak_mb"] for r in runs), "runs": len(runs),
            "all_seconds": [round(r["seconds"], 3) for r in runs]}


def http_measure(n_rows: int, repeat: int, requests: int) -> dict[str, Any]:
    """Baselines (fresh processes), then the served process: uploads, training, scoring.

    Each upload is repeated ``repeat`` times with other rows (the same rows twice would be one
    source registered twice, a 409): the median seconds and the highest peak are reported."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tables = [http_tables(n_rows, root, f"upload{r}", seed=r) for r in range(repeat)]
        csv_path, parquet_path = tables[0]
        print(f"{n_rows:,} rows x 10 columns: CSV {csv_path.stat().st_size / 2**20:.0f} MiB, "
              f"Parquet {parquet_path.stat().st_size / 2**20:.0f} MiB; baselines: median of "
              f"{repeat} fresh processes; uploads: median of {repeat} (other rows each time, "
              "after a 1,000-row warm-up), streamed over loopback")
        pandas = importlib.util.find_spec("pandas") is not None
        found: dict[str, Any] = {
            "pyarrow.csv.read_csv": run_in_child("read", csv_path, repeat),
            "pandas.read_csv": run_in_child("pandas", csv_path, repeat) if pandas else None,
            "pyarrow.parquet.read_table": run_in_child("read", parquet_path, repeat)}
        process, base = service.start_server(root, env={
            "DATA_DIR": str(root / "data"), "WORKER_POLL_SECONDS": "0.2"})
        try:
            with service.api_client(base, timeout=900) as http:
                delta = 10.0 ** np.floor(np.log10(1 / (10 * n_rows)))  # at most 1/(10 n)
                http.put("/v1/patient-budget", json={  # the organisation's, as an admin would
                    "epsilon": 8, "delta": delta}).raise_for_status()
                for path in http_tables(1000, root, "warm-up", seed=99):  # not timed
                    upload(http, path, pid=process.pid, delta=delta)
                for k, fmt in enumerate(("csv", "parquet")):
                    found[fmt] = median_upload([upload(http, pair[k], pid=process.pid,
                                                       delta=delta) for pair in tables])
                found["train"] = train(http, found["csv"]["dataset_id"], process.pid)
                crisis = http.post("/v1/datasets", json={
                    "name": "crisis", "source": {"kind": "synthetic", "n_rows": 8000, "seed": 7},
                    "privacy_budget": {"epsilon": 8, "delta": 1e-5}})
                crisis.raise_for_status()
                found["crisis"] = train(http, crisis.json()["id"], process.pid)
            found["latency"] = latencies(base, {found["train"]["model_id"]: SCHEMA,
                                                found["crisis"]["model_id"]: BUILT_IN_SCHEMA},
                                         requests)
        finally:
            processes.stop(process, seconds=60)
    return found


def http_report(found: dict[str, Any]) -> None:
    arrow_csv, arrow_pq = found["pyarrow.csv.read_csv"], found["pyarrow.parquet.read_table"]
    rows = [("CSV", "pyarrow.csv.read_csv", arrow_csv, arrow_csv),
            ("CSV", "pandas.read_csv", found["pandas.read_csv"], arrow_csv),
            ("CSV", "PUT through the API", found["csv"], arrow_csv),
            ("Parquet", "pyarrow.parquet.read_table", arrow_pq, arrow_pq),
            ("Parquet", "PUT through the API", found["parquet"], arrow_pq)]
    print("\n| format | what | seconds | peak RSS (MiB) | RSS before (MiB) | x bare pyarrow |")
    print("|---|---|---:|---:|---:|---:|")
    for fmt, label, r, bare in rows:
        if r is None:
            print(f"| {fmt} | {label} | not installed | | | |")
            continue
        print(f"| {fmt} | {label} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | "
              f"{r['base_mb']:.0f} | {r['seconds'] / bare['seconds']:.2f} |")
    up = found["csv"]
    ratio, peak = up["seconds"] / arrow_csv["seconds"], max(
        found[f]["peak_mb"] for f in ("csv", "parquet"))
    pandas = found["pandas.read_csv"]
    since = "a VmHWM reset just before" if up["exact_peak"] else "start-up (no clear_refs)"
    print(f"\nUpload seconds, each run: CSV {up['all_seconds']}, Parquet "
          f"{found['parquet']['all_seconds']}")
    print(f"API process: peak RSS of each upload since {since}; server CPU "
          f"{up['cpu_s']:.1f} s (CSV), {found['parquet']['cpu_s']:.1f} s (Parquet); "
          f"{up['rows']:,} rows, {up['training_rows']:,} training rows")
    print(f"- CSV upload / pyarrow.csv.read_csv = {ratio:.2f}x (goal <= {GOAL_RATIO:g}x): "
          f"{'met' if ratio <= GOAL_RATIO else 'NOT met'}"
          + ("" if pandas is None else
             f"; / pandas.read_csv = {up['seconds'] / pandas['seconds']:.2f}x"))
    print(f"- highest upload peak RSS = {peak:.0f} MiB (goal <= {GOAL_PEAK_MB:.0f} MiB): "
          f"{'met' if peak <= GOAL_PEAK_MB else 'NOT met'}")
    trained, crisis = found["train"], found["crisis"]
    print(f"- default job on the CSV rows: {trained['seconds']:.1f} s to a model "
          f"(API process peak RSS {trained['peak_mb']:.0f} MiB, embedded worker); on the "
          f"8,000-row crisis dataset: {crisis['seconds']:.1f} s")
    times = found["latency"]
    p = {m: (percentile_ms(t, 0.5), percentile_ms(t, 0.99)) for m, t in times.items()}
    (own, crisis_id) = (trained["model_id"], crisis["model_id"])
    print(f"- POST /v1/risk, {len(times[own])} sequential requests per model (keep-alive): "
          f"upload model p50 {p[own][0]:.1f} ms, p99 {p[own][1]:.1f} ms; crisis model p50 "
          f"{p[crisis_id][0]:.1f} ms, p99 {p[crisis_id][1]:.1f} ms; p99 ratio "
          f"{p[own][1] / p[crisis_id][1]:.2f}")
    print(f"- scoring p99 {p[own][1]:.1f} ms (goal <= {P99_GOAL_MS:g} ms): "
          f"{'met' if p[own][1] <= P99_GOAL_MS else 'NOT met'}; load average "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} CPU cores seen")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh processes per step; --http: uploads per format")
    parser.add_argument("--http", action="store_true", help="through a served process")
    parser.add_argument("--requests", type=int, default=500, help="--http: scoring calls")
    parser.add_argument("--measure", nargs=2, metavar=("STEP", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return
    if args.http:
        http_report(http_measure(args.rows, args.repeat, args.requests))
    else:
        report(compare(args.rows, args.repeat))


if __name__ == "__main__":
    main()
