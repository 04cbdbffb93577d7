"""What the patient budget costs: admission with many blocks, and keying an upload in.

Setting: a fresh SQLite database (and PostgreSQL with ``--postgres URL``, in a schema of its
own) and the organisation's patient space (``app.ledger.spaces``). 50 private datasets of
100,000 patients each, drawn from 1,000,000 ids as a sliding window (each patient in about 5
consecutive datasets: monthly re-exports) with 1% churn (each dataset swaps 1,000 of its window
for patients anywhere), so the space holds thousands of distinct blocks. Each is keyed in by
``app.datasets.patients.patient_index.add_dataset`` and charged 3 DP-SGD jobs through
``app.ledger.service.reserve`` (2 committed, 1 left reserved).

1. Admission: ``reserve`` of a new job on a random one of the 50 datasets, each in its own
   transaction (rolled back, so every admission sees the same ledger), against the same
   admission on the baseline, measured interleaved in the same run: a generator dataset of
   100,000 rows alone in its seed's space (one block) with the same 3 jobs. Median and p95 ms;
   goal <= 50 ms per admission.
2. Upload (SQLite): a 1,000,000-row CSV (``bench.ingest.make_table``: ids ``pt-0`` to
   ``pt-999999``, so it shares patients with every block: the worst case, every live block
   splits) uploaded into that space through the upload flow the route calls (claim, receive,
   accept with ``add_dataset``; ``--http``: also a streamed PUT to a real ``dpcrisis serve``,
   warmed up by a 1,000-row upload, ``--repeat`` times, each server on a fresh copy of the
   space as the flow found it, each PUT paired with a bare read just before it: the machine's
   speed drifts by half within minutes, and the medians of pairs measured together are what
   compare), and the same into a fresh space that holds nobody yet, against a bare
   ``pyarrow.csv.read_csv`` of the same file in fresh processes in the same run (goal <= 3x,
   medians; beside it the worst-case PUT against the run's fastest bare read: a fresh
   process's first read varies severalfold within one run, its 220 MB of fresh pages costing
   more or less); and ``add_dataset`` alone for the same ids, in a
   transaction rolled back. The space's delta is set to 1e-7 first (<= 1/(10 n) for
   1,000,000 rows). The index's fold runs after each upload's commit, off the request
   (``app.flows.index_upkeep``): populating runs it after each ``add_dataset``, and the flow
   waits for it after timing the upload (its seconds printed apart).

In-process measurements start after ``gc.freeze()``, as the service does after start-up.

Run: .venv/bin/python bench/patient_budget.py [--quick] [--postgres URL] [--http]
"""

import argparse
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.principal import Principal  # noqa: E402
from app.core.database import Database, set_database  # noqa: E402
from app.core.migrations import upgrade_head  # noqa: E402
from app.core.settings import settings  # noqa: E402
from app.datasets import service as dataset_service  # noqa: E402
from app.datasets import uploads  # noqa: E402
from app.datasets.intake.table_format import CSV  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.datasets.patients import patient_index
from app.datasets.schemas import DatasetCreate  # noqa: E402
from app.flows import index_upkeep  # noqa: E402
from app.flows import upload as upload_flow  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.ledger import service as ledger_service  # noqa: E402
from app.ledger import spaces  # noqa: E402
from app.ledger.release import Scope  # noqa: E402
from app.privacy import accounting  # noqa: E402
from bench import ingest, processes  # noqa: E402
from bench import service as bench_service  # noqa: E402

GOAL_MS, GOAL_RATIO = 50.0, 3.0
BUDGET = {"epsilon": 8.0, "delta": 1e-6}
# Each job: epsilon about 0.78 alone; about 70 of them fit one patient's budget of 8.
JOB = accounting.Mechanism(noise_multiplier=2.0, sample_rate=0.01, steps=1000)
JOBS, COMMITTED, CHURN = 3, 2, 0.01


def cohorts(n_datasets: int, patients: int, universe: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    """Each dataset's patient numbers: a window sliding over ``universe`` with ``CHURN`` of it
    swapped for patients drawn from anywhere outside it."""
    stride = (universe - patients) // max(n_datasets - 1, 1)
    found = []
    for k in range(n_datasets):
        window = np.arange(k * stride, k * stride + patients)
        swap = int(CHURN * patients)
        outside = np.setdiff1d(rng.choice(universe, 3 * swap, replace=False), window)[:swap]
        kept = rng.choice(window, patients - len(outside), replace=False)
        found.append(np.concatenate([kept, outside]))
    return found


def id_strings(numbers: np.ndarray) -> pa.Array:
    """The ids as ``bench.ingest.make_table`` writes them."""
    return pa.array(np.char.add("pt-", numbers.astype(str)))


def register(db: Database, name: str, delta: float = BUDGET["delta"], *,
             synthetic_rows: int | None = None) -> int:
    """A private upload (it joins the organisation's space) or a generator dataset."""
    source = ({"kind": "upload"} if synthetic_rows is None
              else {"kind": "synthetic", "n_rows": synthetic_rows})
    request = {"name": name, "source": source,
               "privacy_budget": {"epsilon": BUDGET["epsilon"], "delta": delta}}
    if synthetic_rows is None:
        request["schema"] = ingest.SCHEMA_DOC
    with db.session_scope() as session:
        return dataset_service.create(session=session,
                                      request=DatasetCreate.model_validate(request)).id


def new_job(session: Session, dataset_id: int) -> Job:
    job = Job(dataset_id=dataset_id, noise_multiplier=JOB.noise_multiplier,
              sample_rate=JOB.sample_rate, steps=JOB.steps, epochs=10, delta=1e-7,
              max_grad_norm=1.0, training={})
    session.add(job)
    session.flush()
    return job


def reserve(session: Session, dataset_id: int) -> int:
    """One admission: a new job's spend reserved (``ledger_service.reserve``)."""
    job = new_job(session, dataset_id)
    dataset = session.get(Dataset, dataset_id)
    assert dataset is not None
    ledger_service.reserve(session=session, dataset=dataset, scope=Scope.job(job.id), event=JOB,
                           clip_norm=1.0, delta=job.delta)
    return job.id


def charge(db: Database, dataset_id: int) -> None:
    for k in range(JOBS):
        with db.session_scope() as session:
            job_id = reserve(session, dataset_id)
            if k < COMMITTED:
                ledger_service.commit(session=session, scope=Scope.job(job_id))


def populate(db: Database, n_datasets: int, patients: int, universe: int) -> list[int]:
    """The organisation's datasets, keyed in and charged; seconds printed."""
    started, keyed = time.perf_counter(), 0.0
    found = []
    for k, numbers in enumerate(cohorts(n_datasets, patients, universe,
                                        np.random.default_rng(0))):
        dataset_id = register(db, f"org-{k}")
        with db.session_scope() as session:
            space = spaces.organisation(session=session)
            begun = time.perf_counter()
            patient_index.add_dataset(session=session, space_id=space.id,
                                      dataset_id=dataset_id, ids=id_strings(numbers))
            keyed += time.perf_counter() - begun
        index_upkeep.upkeep(database=db, space_id=space.id)  # as after a served upload
        charge(db, dataset_id)
        found.append(dataset_id)
    print(f"{n_datasets} datasets of {patients:,} patients keyed in and charged in "
          f"{time.perf_counter() - started:.1f} s (add_dataset {keyed:.1f} s in all)")
    return found


def live_block_count(db: Database) -> int:
    with db.session_scope() as session:
        space = spaces.organisation(session=session)
        return len(spaces.live_blocks(session=session, space_id=space.id))


def time_admission(db: Database, dataset_id: int) -> float:
    """Seconds of one admission in its own transaction, rolled back."""
    session = db.session_factory()
    try:
        job = new_job(session, dataset_id)  # as the training flow: the job, then its spend
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        started = time.perf_counter()
        ledger_service.reserve(session=session, dataset=dataset, scope=Scope.job(job.id), event=JOB,
                               clip_norm=1.0, delta=job.delta)
        return time.perf_counter() - started
    finally:
        session.rollback()
        session.close()


def settle_heap() -> None:
    """As the service does after start-up (``app.main``): what is loaded so far leaves the
    collector's view, so a full collection of the start-up heap does not land in one measurement."""
    gc.collect()
    gc.freeze()


def percentile(ms: list[float], q: float) -> float:
    ordered = sorted(ms)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def admissions(db: Database, sizes: dict[str, int], n: int) -> dict[str, float]:
    """Interleaved admissions on the org's datasets and on the baseline, in milliseconds."""
    org = populate(db, sizes["datasets"], sizes["patients"], sizes["universe"])
    baseline = register(db, "alone", synthetic_rows=sizes["patients"])
    charge(db, baseline)
    rng = np.random.default_rng(1)
    for dataset_id in (*org[:3], baseline):  # warm caches (parsed events, RDP per step)
        time_admission(db, dataset_id)
    settle_heap()
    ours, alone = [], []
    for _ in range(n):
        ours.append(1000 * time_admission(db, int(rng.choice(org))))
        alone.append(1000 * time_admission(db, baseline))
    return {"blocks": live_block_count(db), "median": statistics.median(ours),
            "p95": percentile(ours, 0.95), "base_median": statistics.median(alone),
            "base_p95": percentile(alone, 0.95)}


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A migrated schema of its own on ``url`` (as tests/conftest.py makes them), dropped after."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        scoped = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
        upgrade_head(scoped)
        yield scoped
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def admission_rows(root: Path, sizes: dict[str, int], n: int,
                   postgres: str | None) -> tuple[Database, list[dict[str, float]]]:
    """The admission table, on SQLite and (``postgres``) on PostgreSQL; the SQLite database
    stays open for the upload."""
    url = f"sqlite:///{root / 'bench.db'}"
    upgrade_head(url)
    sqlite = Database(url)
    found = {"SQLite": admissions(sqlite, sizes, n)}
    if postgres:
        with postgres_schema(postgres) as scoped:
            db = Database(scoped)
            try:
                found["PostgreSQL"] = admissions(db, sizes, n)
            finally:
                db.dispose()
    print(f"\nAdmission: {n} admissions each, interleaved (rolled back); baseline: a dataset "
          f"alone in its seed's space (1 block), the same {JOBS} jobs\n")
    print("| database | live blocks | median ms | p95 ms | baseline median | baseline p95 "
          "| x baseline (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, row in found.items():
        print(f"| {label} | {row['blocks']:,} | {row['median']:.1f} | {row['p95']:.1f} | "
              f"{row['base_median']:.1f} | {row['base_p95']:.1f} | "
              f"{row['median'] / row['base_median']:.2f} |")
    return sqlite, list(found.values())


# --- the upload -----------------------------------------------------------------------------

UPLOAD_DELTA = 1e-7


def add_dataset_alone(db: Database, csv_path: Path) -> float:
    """Seconds of ``add_dataset`` for the CSV's ids on a registered dataset, rolled back."""
    dataset_id = register(db, "keyed-alone", UPLOAD_DELTA)
    ids = pa_csv.read_csv(csv_path).column("patient_id")
    session = db.session_factory()
    try:
        space = spaces.organisation(session=session)
        started = time.perf_counter()
        patient_index.add_dataset(session=session, space_id=space.id, dataset_id=dataset_id,
                                  ids=ids)
        return time.perf_counter() - started
    finally:
        session.rollback()
        session.close()


def flow_upload(db: Database, csv_path: Path) -> float:
    """Seconds of the upload flow the route calls (claim, receive, accept), from the file."""
    dataset_id = register(db, "uploaded", UPLOAD_DELTA)
    set_database(db)
    try:
        started = time.perf_counter()
        claimed = upload_flow.claim(dataset_id=dataset_id)
        received = uploads.receive(claimed=claimed, path=csv_path, media_type=CSV)
        upload_flow.accept(received=received, principal=Principal.cli())
        seconds = time.perf_counter() - started
        begun = time.perf_counter()  # the index's fold, after the answer (not timed above)
        index_upkeep.wait_idle()
        print(f"  (upload flow {seconds:.2f} s; its index upkeep after the commit "
              f"{time.perf_counter() - begun:.2f} s more, off the request)")
        return seconds
    finally:
        set_database(None)


def fresh_space(root: Path, name: str) -> Database:
    """A fresh database whose organisation's space holds nobody yet (the first upload)."""
    url = f"sqlite:///{root / name}"
    upgrade_head(url)
    db = Database(url)
    with db.session_scope() as session:
        spaces.organisation(session=session).budget_delta = UPLOAD_DELTA
    return db


def snapshot(db: Database, root: Path, name: str) -> Path:
    """``db`` (SQLite's backup API) and the data directory as they are now: the state each
    served repeat starts from, so every timed PUT meets the same space."""
    folder = root / name
    folder.mkdir()
    with (sqlite3.connect(db.url.removeprefix("sqlite:///")) as source,
          sqlite3.connect(folder / "bench.db") as target):
        source.backup(target)
    shutil.copytree(settings.data_dir, folder / "data")
    return folder


def http_uploads(root: Path, state: Path, csv_path: Path, repeat: int,
                 bare_csv: Path) -> list[tuple[float, float]]:
    """``repeat`` pairs (PUT seconds, bare read seconds): each a streamed PUT of the CSV to a
    fresh ``dpcrisis serve`` on a fresh copy of ``state``, after a 1,000-row upload that warms
    the process up (as ``bench/ingest.py --http``), and a bare read of ``bare_csv`` in a
    fresh process right before it, so the two are measured in the same minute."""
    pairs = []
    for k in range(repeat):
        run = root / f"{state.name}-{k}"
        shutil.copytree(state, run)
        os.sync()  # the copy's writeback done before the clocks start, not during them
        read = ingest.run_in_child("read", bare_csv, 1)["seconds"]
        process, base = bench_service.start_server(run, "--no-worker", env={
            "DATA_DIR": str(run / "data"), "DATABASE_URL": f"sqlite:///{run / 'bench.db'}"})
        try:
            with bench_service.api_client(base, timeout=900) as http:
                warm_up = ingest.write_csv(ingest.make_table(1000, seed=99, prefix="warm-up-"),
                                           run / "warm-up.csv")
                ingest.upload(http, warm_up, pid=process.pid, delta=UPLOAD_DELTA)  # not timed
                seconds = float(ingest.upload(http, csv_path, pid=process.pid,
                                              delta=UPLOAD_DELTA)["seconds"])
        finally:
            processes.stop(process, seconds=60)
            shutil.rmtree(run, ignore_errors=True)
        pairs.append((seconds, read))
    return pairs


def upload_rows(db: Database, root: Path, rows: int, repeat: int, http: bool) -> None:
    """The upload table: each path into a fresh space and into the bench's, against the bare
    read (the flow and the PUT send other rows: the same rows twice would be a 409)."""
    with db.session_scope() as session:
        space = spaces.organisation(session=session)
        space.budget_delta = UPLOAD_DELTA
        known = space.index_rows
    settle_heap()
    flow_csv, put_csv = (ingest.write_csv(ingest.make_table(rows, seed=7 + k),
                                          root / f"upload{k}.csv") for k in range(2))
    print(f"\nUpload: {rows:,}-row CSV ({flow_csv.stat().st_size / 2**20:.0f} MiB) into the "
          f"organisation's space ({known:,} patients, {live_block_count(db):,} live blocks) "
          f"and, for comparison, into a fresh space; bare read: median of {repeat} fresh "
          "processes; PUT: median of as many served processes, each on a fresh copy of the "
          "space, its bare read right before it\n")
    states = {"this": snapshot(db, root, "this-space")} if http else {}
    fastest: float | None = None
    bare = ingest.run_in_child("read", flow_csv, repeat)["seconds"]
    found: dict[str, tuple[float | None, float]] = {
        "add_dataset alone (rolled back)": (None, add_dataset_alone(db, flow_csv))}
    empty = fresh_space(root, "fresh-flow.db")
    found["upload flow: claim, receive, accept"] = (flow_upload(empty, flow_csv),
                                                   flow_upload(db, flow_csv))
    empty.dispose()
    if http:
        empty = fresh_space(root, "fresh-put.db")
        states["fresh"] = snapshot(empty, root, "fresh-space")
        empty.dispose()
        served = {name: http_uploads(root, state, put_csv, repeat, flow_csv)
                  for name, state in states.items()}
        reads = [bare, *(b for pairs in served.values() for _, b in pairs)]
        bare, fastest = statistics.median(reads), min(reads)
        for name, pairs in served.items():
            print(f"  (PUT into {name} space: " + ", ".join(
                f"{put:.2f} s against a bare read of {read:.2f} s" for put, read in pairs) + ")")
        fresh_put, this_put = (statistics.median(put for put, _ in served[name])
                               for name in ("fresh", "this"))
        found["PUT through dpcrisis serve"] = (fresh_put, this_put)
    print("| what | fresh space: s | x bare read | this space: s | x bare read |")
    print("|---|---:|---:|---:|---:|")
    print(f"| pyarrow.csv.read_csv | {bare:.2f} | 1.00 | | |")
    for label, (fresh, ours) in found.items():
        first = "| | |" if fresh is None else f"| {fresh:.2f} | {fresh / bare:.2f} |"
        print(f"| {label} {first} {ours:.2f} | {ours / bare:.2f} |")
    worst = max(ours for fresh, ours in found.values() if fresh is not None) / bare
    print(f"\n- upload / bare read = {worst:.2f}x (goal <= {GOAL_RATIO:g}x): "
          f"{'met' if worst <= GOAL_RATIO else 'NOT met'}; live blocks after: "
          f"{live_block_count(db):,}")
    if fastest is not None:  # a fresh process's first read swings with the kernel's pages
        print(f"- the worst-case PUT against the run's fastest bare read ({fastest:.2f} s): "
              f"{found['PUT through dpcrisis serve'][1] / fastest:.2f}x")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 datasets of 10,000 of 100,000 ids, a 100,000-row upload")
    parser.add_argument("--admissions", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3,
                        help="bare reads (fresh processes) and served PUTs (fresh copies)")
    parser.add_argument("--postgres", metavar="URL", help="also admission on PostgreSQL")
    parser.add_argument("--http", action="store_true", help="also a PUT to a served process")
    args = parser.parse_args(argv)
    sizes = ({"datasets": 10, "patients": 10_000, "universe": 100_000} if args.quick else
             {"datasets": 50, "patients": 100_000, "universe": 1_000_000})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings.data_dir = root / "data"
        db, rows = admission_rows(root, sizes, args.admissions, args.postgres)
        worst = max(row["p95"] for row in rows)
        print(f"\n- admission p95 = {worst:.1f} ms (goal <= {GOAL_MS:g} ms per admission): "
              f"{'met' if worst <= GOAL_MS else 'NOT met'}")
        try:
            upload_rows(db, root, sizes["universe"], args.repeat, args.http)
        finally:
            db.dispose()


if __name__ == "__main__":
    main()
