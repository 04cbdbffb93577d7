"""Peak memory of one upload's intake for the worst files we know, against an
ordinary valid file measured in the same run.

Each file goes through ``app.datasets.intake.ingest.ingest_and_store`` (the upload route's path:
every check, then nothing kept on a refusal) in a fresh process. The figure is that process's
peak RSS growth during the upload: ``VmHWM`` reset through ``/proc/self/clear_refs`` after the
imports and a warm-up upload of a tiny valid file, minus the RSS then. The process's address
space is capped at its size then plus ``--cap-gib`` (default 4), so a file that would take
gigabytes fails there (reported as such) instead of taking the machine.

Files (``--rows`` rows, default 2,000,000, the upload limit; the schema of bench/ingest.py):

- baseline CSV / Parquet: a valid random table (accepted);
- dictionary bomb, one row group: a 2 MB-class file, one 1 MiB string dictionary-encoded on
  every row of a categorical column (a reader without the limits would take 24 GB);
- dictionary bomb, small row groups: the same in row groups of 2,000 rows (2.67 GB unguarded);
- id bomb: the 1 MiB string in the id column instead;
- values at the limit: 1 KiB dictionary values (the longest accepted) on every row of the id,
  a categorical and a numeric column: read to the end, every row refused;
- wide header: a 1 MiB CSV header of 349,525 names (a core for tens of minutes, unguarded);
- huge CSV field: one 64 MiB value in the second line.

Goal: every upload under 500 MB of peak growth.

Run: .venv/bin/python bench/upload_peak_memory.py [--rows 2000000] [--cap-gib 4] [--timeout 600]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.intake import ingest  # noqa: E402
from bench.ingest import SCHEMA, make_table, write_csv  # noqa: E402

GOAL_MB = 500.0
BIG = 1 << 20


def _status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} missing")


def _dictionary(rows: int, value: str) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array([value]))


def bomb(path: Path, rows: int, *, row_group: int, columns: Sequence[str] = ("sex",),
         value_bytes: int = BIG) -> Path:
    """A valid table but for ``columns``: one ``value_bytes`` string on every row."""
    table = make_table(rows)
    for name in columns:
        table = table.set_column(table.schema.get_field_index(name), name,
                                 _dictionary(rows, "x" * value_bytes))
    pq.write_table(table, path, row_group_size=row_group)
    return path


def wide_header(path: Path, rows: int) -> Path:
    names = ",".join(f"c{i:05x}" for i in range(349_525))[: BIG - 1]
    path.write_bytes(names.encode() + b"\n1\n")
    return path


def huge_field(path: Path, rows: int) -> Path:
    header = ",".join(SCHEMA.columns).encode()
    with path.open("wb") as f:
        f.write(header + b"\n" + b"x" * (64 * BIG) + b"," * (len(SCHEMA.columns) - 1) + b"\n")
    return path


def baseline_csv(path: Path, rows: int) -> Path:
    return write_csv(make_table(rows), path)


def baseline_parquet(path: Path, rows: int) -> Path:
    pq.write_table(make_table(rows), path)
    return path


FILES: list[tuple[str, str, Callable[[Path, int], Path]]] = [
    ("baseline CSV (valid)", "csv", baseline_csv),
    ("baseline Parquet (valid)", "parquet", baseline_parquet),
    ("dictionary bomb, one row group", "parquet", lambda p, n: bomb(p, n, row_group=n)),
    ("dictionary bomb, row groups of 2,000", "parquet",
     lambda p, n: bomb(p, n, row_group=2_000)),
    ("id bomb, one row group", "parquet",
     lambda p, n: bomb(p, n, row_group=n, columns=("patient_id",))),
    ("1 KiB values on every row of 3 columns", "parquet",
     lambda p, n: bomb(p, n, row_group=n, columns=("patient_id", "sex", "bmi"),
                       value_bytes=1024)),
    ("wide header (1 MiB, 349,525 names)", "csv", wide_header),
    ("huge CSV field (64 MiB)", "csv", huge_field),
]


def measure(path: Path, warm_up: Path, cap_gib: float) -> dict[str, Any]:
    """One upload in this (fresh) process: outcome, seconds, peak RSS growth."""
    media = ingest.PARQUET if path.suffix == ".parquet" else ingest.CSV
    with tempfile.TemporaryDirectory() as data_dir:
        ingest.ingest_and_store(warm_up, media_type=ingest.CSV, schema=SCHEMA,
                                data_dir=Path(data_dir))
        cap = _status("VmSize") + int(cap_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        Path("/proc/self/clear_refs").write_text("5")
        base, start = _status("VmRSS"), time.perf_counter()
        try:
            ingest.ingest_and_store(path, media_type=media, schema=SCHEMA,
                                    data_dir=Path(data_dir))
            outcome = "accepted"
        except ingest.TableInvalid as error:
            first = error.extra["errors"][0]
            outcome = f"422: {first['message']}"[:90]
        except Exception as error:  # noqa: BLE001  # what the bench is looking for
            outcome = f"FAILED {type(error).__name__}: {error}"[:90]
        return {"outcome": outcome, "seconds": time.perf_counter() - start,
                "peak_mb": (_status("VmHWM") - base) / 1e6}


def run_all(rows: int, cap_gib: float, timeout: float) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        warm_up = baseline_csv(directory / "warm.csv", 1000)
        for k, (label, suffix, build) in enumerate(FILES):
            path = build(directory / f"file{k}.{suffix}", rows)
            try:
                done = subprocess.run(
                    [sys.executable, __file__, "--measure", str(path), str(warm_up),
                     str(cap_gib)], capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                result = {"outcome": f"FAILED: still running after {timeout:g} s",
                          "seconds": timeout, "peak_mb": float("nan")}
            else:
                result = json.loads(done.stdout.strip().splitlines()[-1]) if (
                    done.returncode == 0) else {"outcome": f"FAILED: exit {done.returncode}",
                                                "seconds": 0.0, "peak_mb": float("nan")}
            results.append({"file": label, "mib": path.stat().st_size / 2**20, **result})
            path.unlink()
    return results


def report(results: list[dict[str, Any]], rows: int) -> None:
    print(f"{rows:,} rows per table; peak RSS growth of one upload in a fresh process "
          f"(goal for the worst files: < {GOAL_MB:.0f} MB)\n")
    print("| file | MiB on disk | outcome | seconds | peak growth (MB) |")
    print("|---|---:|---|---:|---:|")
    for r in results:
        print(f"| {r['file']} | {r['mib']:.1f} | {r['outcome']} | {r['seconds']:.2f} | "
              f"{r['peak_mb']:.0f} |")
    baseline = max(r["peak_mb"] for r in results[:2])
    worst = max(results[2:], key=lambda r: r["peak_mb"] if r["peak_mb"] == r["peak_mb"]
                else float("inf"))
    met = all(r["peak_mb"] < GOAL_MB and r["outcome"].startswith("422") for r in results[2:])
    print(f"\n- worst files: highest {worst['peak_mb']:.0f} MB ({worst['file']}), goal < "
          f"{GOAL_MB:.0f} MB, each refused with a 422: {'met' if met else 'NOT met'}")
    print(f"- baseline, valid files of the same size (same run): {baseline:.0f} MB; the worst "
          f"file is {worst['peak_mb'] / baseline:.2f}x that")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--cap-gib", type=float, default=4.0,
                        help="address space allowed above the measuring process's own")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one upload may take before it counts as failed")
    parser.add_argument("--measure", nargs=3, metavar=("PATH", "WARM_UP", "CAP"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        path, warm_up, cap = args.measure
        print(json.dumps(measure(Path(path), Path(warm_up), float(cap))))
        return
    report(run_all(args.rows, args.cap_gib, args.timeout), args.rows)


if __name__ == "__main__":
    main()
