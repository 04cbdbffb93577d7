"""The API process's peak memory while a million-row upload arrives, and the worker's ingest
time against another tree's (the code on ``main``), in one run.

Served: a real ``dpcrisis serve --no-worker`` and a ``dpcrisis worker`` apart (temporary SQLite
database and data directory) receive a ``--rows`` CSV (the table of bench/ingest.py, 10
columns) into the organisation's patient space as one streamed ``PUT /v1/datasets/{id}/data``
with ``Prefer: wait=600``; the figure is each process's peak RSS (``VmHWM``, reset through
``/proc/<pid>/clear_refs`` after a 1,000-row warm-up upload), and the answer must be the
dataset, ``ready``.

Ingest: ``app.datasets.intake.ingest.ingest_and_store`` of the same CSV, then the file kept, as each
tree's upload does it (a spooled body's SHA-256 given, taken as it arrived), timed in
a fresh process of each tree (``--baseline``, default a temporary ``git worktree`` of
``main``), alternating, ``--repeat`` times; the ratio is this tree's median over the
baseline's.

Goals: the API's peak under 300 MB (its RSS at rest, the imports, is shown apart); the
ingest ratio at most 1.0 (no slower).

Run: .venv/bin/python bench/upload_memory.py [--rows 1000000] [--repeat 3] [--baseline DIR]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import service  # noqa: E402
from bench.ingest import (  # noqa: E402
    SCHEMA_DOC,
    http_tables,
    reset_peak,
    status_mb,
)

GOAL_API_MB, GOAL_RATIO, CHUNK_BYTES = 300.0, 1.0, 1 << 20
# A spooled body's SHA-256 was taken as it arrived: a tree whose ingest takes it is given it
# (and links the spool, as its worker does); the other hashes the file itself, on a thread.
# Both import what a worker process imports (torch among it), so neither pays for imports
# the other made before its clock started, nor runs in a heap the other's imports warmed.
_TIME_INGEST = """
import inspect, sys, tempfile, time
import worker.runner
from pathlib import Path
from app.datasets.intake import ingest, table_store
from bench.ingest import SCHEMA
path = Path(sys.argv[1])
spooled = "sha256" in inspect.signature(ingest.ingest_and_store).parameters
given = {"sha256": table_store.file_sha256(path)} if spooled else {}
with tempfile.TemporaryDirectory() as data_dir:
    start = time.perf_counter()
    pending = ingest.ingest_and_store(path, media_type=ingest.CSV, schema=SCHEMA,
                                      data_dir=Path(data_dir), **given)
    pending.commit(link=True) if spooled else pending.commit()
    print(time.perf_counter() - start)
"""


def upload(http: httpx.Client, path: Path, *, delta: float) -> dict[str, Any]:
    """Register an upload and stream ``path`` as its body, waiting for the ingest."""
    created = http.post("/v1/datasets", json={
        "name": f"bench-{path.name}", "source": {"kind": "upload"}, "schema": SCHEMA_DOC,
        "privacy_budget": {"epsilon": 8, "delta": delta}})
    created.raise_for_status()
    start = time.perf_counter()
    with path.open("rb") as body:
        sent = http.put(f"/v1/datasets/{created.json()['id']}/data",
                        content=iter(lambda: body.read(CHUNK_BYTES), b""),
                        headers={"Content-Type": "text/csv", "Prefer": "wait=600"})
    if sent.status_code != 200 or sent.json()["state"] != "ready":
        raise SystemExit(f"upload of {path.name}: {sent.status_code} {sent.text[:500]}")
    return {"seconds": time.perf_counter() - start, "rows": sent.json()["rows"]}


@contextmanager
def served(root: Path) -> Iterator[tuple[int, int, str]]:
    """The API (no embedded worker) and a worker apart: their pids and the API's URL."""
    env = {"DATA_DIR": str(root / "data"), "WORKER_POLL_SECONDS": "0.2",
           "PYTHONPATH": str(ROOT)}
    api, base = service.start_server(root, "--no-worker", env=env)
    worker = service.run_cli(root, "worker", env=env)
    try:
        yield api.pid, worker.pid, base
    finally:
        for process in (api, worker):
            process.terminate()
            process.wait(timeout=60)


def served_peaks(rows: int, root: Path) -> dict[str, Any]:
    csv_path, _ = http_tables(rows, root, "upload")
    with served(root) as (api, worker, base), service.api_client(base, timeout=900) as http:
        delta = 10.0 ** int(f"{1 / (10 * rows):e}".split("e")[1])  # at most 1/(10 n)
        http.put("/v1/patient-budget", json={"epsilon": 8, "delta": delta}).raise_for_status()
        upload(http, http_tables(1000, root, "warm-up", seed=99)[0], delta=delta)
        exact = reset_peak(api) and reset_peak(worker)
        base_mb = status_mb("VmRSS", api)
        found = upload(http, csv_path, delta=delta)
        return {**found, "api_peak_mb": status_mb("VmHWM", api), "api_base_mb": base_mb,
                "worker_peak_mb": status_mb("VmHWM", worker), "exact": exact,
                "csv_mib": csv_path.stat().st_size / 2**20}


def time_ingest(tree: Path, path: Path) -> float:
    done = subprocess.run([sys.executable, "-c", _TIME_INGEST, str(path)], cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
                          text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


@contextmanager
def baseline_tree(given: Path | None) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "main"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        "main"], check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tree)], check=True, capture_output=True)


def ingest_ratio(rows: int, root: Path, repeat: int, given: Path | None) -> dict[str, Any]:
    csv_path, _ = http_tables(rows, root, "ingest", seed=5)
    here: list[float] = []
    there: list[float] = []
    with baseline_tree(given) as tree:
        time_ingest(tree, csv_path)  # warm both trees' caches
        time_ingest(ROOT, csv_path)
        for _ in range(repeat):
            there.append(time_ingest(tree, csv_path))
            here.append(time_ingest(ROOT, csv_path))
    return {"here": statistics.median(here), "baseline": statistics.median(there),
            "ratio": statistics.median(here) / statistics.median(there)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout to compare the ingest against (default: main)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        peaks = served_peaks(args.rows, Path(tmp))
        print(f"{peaks['rows']:,} rows, CSV {peaks['csv_mib']:.0f} MiB, Prefer: wait: "
              f"{peaks['seconds']:.2f} s to the 200")
        print(f"API peak RSS {peaks['api_peak_mb']:.0f} MB (at rest {peaks['api_base_mb']:.0f}"
              f" MB; goal < {GOAL_API_MB:.0f}): "
              f"{'met' if peaks['api_peak_mb'] < GOAL_API_MB else 'MISSED'}"
              f"{'' if peaks['exact'] else ' (peak since start: clear_refs refused)'}")
        print(f"worker peak RSS {peaks['worker_peak_mb']:.0f} MB")
        ratio = ingest_ratio(args.rows, Path(tmp), args.repeat, args.baseline)
        print(f"ingest + keep, median of {args.repeat} fresh processes each: this tree "
              f"{ratio['here']:.2f} s, baseline {ratio['baseline']:.2f} s, ratio "
              f"{ratio['ratio']:.2f} (goal <= {GOAL_RATIO:.1f}): "
              f"{'met' if ratio['ratio'] <= GOAL_RATIO else 'MISSED'}")


if __name__ == "__main__":
    main()
