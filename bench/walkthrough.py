"""A walk-through on a public table with missing values: the figures the service reports next
to the truth computed from the rows.

Runs the real service (``dpcrisis serve``: a temporary SQLite database, the embedded worker)
on a random loopback port and drives it as a clinic would: upload half of the table (one
feature declared ``"missing": "reference"``, a stated fraction of it blanked), train at
epsilon 1 and 3 (only ``target_epsilon`` given), score every held-back patient through
``/v1/risk/batch`` (refusals counted), run monitoring of the epsilon-1 model on an unshifted
and on a shifted follow-up, and compare the two models on the unshifted follow-up. Truths:
AUCs from the service's own scores on rows it never saw; distances between the two cohorts'
columns on the service's bins (``bench/walkthrough_truth.py``).

    python bench/walkthrough.py [--seed 2026] [--rows N] [--quick]

Prints one table (quantity, reported, interval, truth, covered). Exits non-zero only on an
error (a refused patient included), never on an interval that misses: it reports.
"""

import argparse
import math
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import processes  # noqa: E402
from bench import walkthrough_truth as truth  # noqa: E402

BUDGET = {"epsilon": 20, "delta": 1e-6}
CHUNK = 2000
Row = tuple[str, float | None, list[float] | None, float | None]


def _wait(http: httpx.Client, path: str, seconds: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        found: dict[str, Any] = http.get(path).json()
        if found["status"] not in ("queued", "running"):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} still {found['status']} after {seconds:g} s")
        time.sleep(0.2)
    if found["status"] != "succeeded":
        raise SystemExit(f"{path} ended {found['status']}: {found.get('error')}")
    return found


def _upload(http: httpx.Client, name: str, parts: truth.Parts, rows: tuple[np.ndarray, ...],
            follow_up_of: int | None = None) -> int:
    body: dict[str, Any] = {"name": name, "source": {"kind": "upload"},
                            "schema": parts.schema, "privacy_budget": BUDGET}
    if follow_up_of is not None:
        body["follow_up"] = {"model_id": follow_up_of, "period_start": "2026-01-01",
                             "period_end": "2026-06-30"}
    created = http.post("/v1/datasets", json=body)
    if created.status_code != 201:
        raise SystemExit(f"register {name}: {created.status_code} {created.text}")
    sent = http.put(f"/v1/datasets/{created.json()['id']}/data",
                    content=truth.to_csv(parts, *rows),
                    headers={"Content-Type": "text/csv", "Prefer": "wait=120"})
    if sent.status_code != 200:
        raise SystemExit(f"upload {name}: {sent.status_code} {sent.text}")
    return int(created.json()["id"])


def _train(http: httpx.Client, dataset_id: int, epsilon: float, seed: int) -> dict[str, Any]:
    job = http.post("/v1/jobs", json={"dataset_id": dataset_id,
                                      "privacy": {"target_epsilon": epsilon},
                                      "training": {"seed": seed}})
    if job.status_code != 202:
        raise SystemExit(f"job at epsilon {epsilon}: {job.status_code} {job.text}")
    done = _wait(http, f"/v1/jobs/{job.json()['id']}")
    model: dict[str, Any] = http.get(f"/v1/models/{done['model_id']}").json()
    return model


def score(http: httpx.Client, parts: truth.Parts, model_id: int,
          x: np.ndarray) -> tuple[np.ndarray, int]:
    """Every patient's probability through the batch route, and how many were refused."""
    people = truth.patients(parts, x)
    found: dict[str, float] = {}
    for start in range(0, len(people), CHUNK):
        chunk = people[start:start + CHUNK]
        answer = http.post("/v1/risk/batch", params={"view": "compact"},
                           json={"model_id": model_id, "patients": chunk})
        if answer.status_code != 200:
            print(f"# batch refused: {answer.status_code} {answer.text[:300]}")
            continue
        found.update({r["id"]: r["probability"] for r in answer.json()["results"]})
    scores = np.array([found.get(p["id"], np.nan) for p in people])
    return scores, len(people) - len(found)


def _ci(value: Any) -> list[float] | None:
    if isinstance(value, dict):
        value = [value.get("low"), value.get("high")]
    if isinstance(value, list) and len(value) == 2 and None not in value:
        return [float(value[0]), float(value[1])]
    return None


def _auc_rows(label: str, found: dict[str, Any] | None, true: float) -> Row:
    found = found or {}
    value = found.get("roc_auc")
    return (label, value, _ci(found.get("roc_auc_ci")), true)


def _monitor(http: httpx.Client, model_id: int, dataset_id: int, epsilon: float
             ) -> dict[str, Any]:
    run = http.post(f"/v1/models/{model_id}/monitoring-runs",
                    json={"dataset_id": dataset_id, "privacy": {"target_epsilon": epsilon}})
    if run.status_code != 202:
        raise SystemExit(f"monitoring run: {run.status_code} {run.text}")
    return _wait(http, f"/v1/monitoring-runs/{run.json()['id']}")


def _drift_rows(tag: str, run: dict[str, Any], true: dict[str, tuple[float, float]],
                auc: float) -> list[Row]:
    rows: list[Row] = [_auc_rows(f"{tag}: ROC-AUC", run, auc)]
    for feature in sorted(run["features"], key=lambda f: f["name"]):
        psi, w1 = true[feature["name"]]
        rows.append((f"{tag}: PSI {feature['name']}", feature["psi"],
                     _ci(feature["psi_ci"]), psi))
        rows.append((f"{tag}: W1 {feature['name']}", feature["wasserstein"],
                     _ci(feature["wasserstein_ci"]), w1))
    return rows


def walk(args: argparse.Namespace, http: httpx.Client) -> tuple[list[Row], int]:
    """Every step through the API; the table's rows and the refusals counted."""
    parts = truth.prepare(args.rows, args.seed, args.blank, args.shift)
    print(f"# randhie (statsmodels), {sum(len(p[1]) for p in _all(parts)):,} rows, "
          f"outcome {parts.outcome} {parts.upload[1].mean():.0%}; {args.blank:.0%} of "
          f"{truth.BLANKED} blanked MCAR (seed {args.seed}: {parts.blanked:,} values), "
          f"declared missing: reference")
    print(f"# upload {len(parts.upload[1]):,}, held back {len(parts.held_back[1]):,}, "
          f"follow-up {len(parts.follow_up[1]):,}, shifted follow-up "
          f"{len(parts.shifted[1]):,} ({truth.SHIFTED} +{parts.shift:g}, clipped)")
    dataset = _upload(http, "walkthrough", parts, parts.upload)
    models = {eps: _train(http, dataset, eps, args.seed) for eps in (1.0, 3.0)}
    rows: list[Row] = []
    refused = 0
    for eps, model in models.items():
        scores, lost = score(http, parts, model["id"], parts.held_back[0])
        refused += lost
        rows.append(_auc_rows(f"held-out AUC, epsilon {eps:g}", model["metrics"],
                              truth.true_auc(parts.held_back[1], scores)
                              if lost == 0 else math.nan))
    champion, challenger = models[1.0]["id"], models[3.0]["id"]
    truths: dict[str, float] = {}
    for tag, rows_of in (("unshifted", parts.follow_up), ("shifted", parts.shifted)):
        follow = _upload(http, f"follow-up {tag}", parts, rows_of, follow_up_of=champion)
        run = _monitor(http, champion, follow, args.monitor_epsilon)
        _notes(f"monitoring {tag}", run)
        for name, model_id in (("champion", champion), ("challenger", challenger)):
            scores, lost = score(http, parts, model_id, rows_of[0])
            refused += lost
            truths[f"{tag} {name}"] = truth.true_auc(rows_of[1], scores)
        distances = truth.true_distances(parts, parts.upload[0], rows_of[0])
        rows += _drift_rows(f"monitoring {tag}", run, distances, truths[f"{tag} champion"])
        if tag == "unshifted":
            rows += _compare(http, champion, challenger, follow, args, truths)
    return rows, refused


def _all(parts: truth.Parts) -> list[tuple[np.ndarray, ...]]:
    return [parts.upload, parts.held_back, parts.follow_up, parts.shifted]


def _compare(http: httpx.Client, champion: int, challenger: int, follow: int,
             args: argparse.Namespace, truths: dict[str, float]) -> list[Row]:
    made = http.post(f"/v1/models/{champion}/comparisons", json={
        "challenger_id": challenger, "dataset_id": follow,
        "privacy": {"target_epsilon": args.compare_epsilon}})
    if made.status_code != 202:
        raise SystemExit(f"comparison: {made.status_code} {made.text}")
    found = _wait(http, f"/v1/comparisons/{made.json()['id']}")
    print(f"# comparison verdict: {found.get('verdict')}")
    _notes("comparison", found)
    change = (((found.get("difference") or {}).get("overall") or {}).get("roc_auc") or {})
    gap = truths["unshifted challenger"] - truths["unshifted champion"]
    return [_auc_rows("comparison: champion (eps 1) AUC", found["champion"],
                      truths["unshifted champion"]),
            _auc_rows("comparison: challenger (eps 3) AUC", found["challenger"],
                      truths["unshifted challenger"]),
            ("comparison: AUC change (challenger - champion)", change.get("change"),
             _ci(change.get("change_ci")), gap)]


def _notes(tag: str, found: dict[str, Any]) -> None:
    """The service's own notes (why a figure is withheld), one line each, shortened."""
    for note in found.get("notes") or []:
        print(f"# {tag} note: {note[:200]}")


def _fmt(value: float | None) -> str:
    """Four decimals, or three significant digits below 0.01 (a PSI of 2e-05 is not 0)."""
    if value is None:
        return "withheld"
    return f"{value:.4f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


def table(rows: list[Row]) -> str:
    lines = ["| quantity | reported | interval | truth | covered |", "|---|---:|---|---:|---|"]
    for label, value, ci, true in rows:
        interval = "withheld" if ci is None else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"
        covered = ("n/a" if ci is None or true is None or math.isnan(true)
                   else "yes" if ci[0] <= true <= ci[1] else "no")
        lines.append(f"| {label} | {_fmt(value)} | {interval} | {_fmt(true)} | {covered} |")
    return "\n".join(lines)


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rows", type=int, default=None, help="rows sampled (default: all)")
    parser.add_argument("--quick", action="store_true", help="3,000 rows")
    parser.add_argument("--blank", type=float, default=0.15)
    parser.add_argument("--shift", type=float, default=1.0)
    parser.add_argument("--monitor-epsilon", type=float, default=1.0)
    parser.add_argument("--compare-epsilon", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.quick and args.rows is None:
        args.rows = 3000
    previous = signal.signal(signal.SIGTERM, _exit)  # a stopped walk stops its server too
    with tempfile.TemporaryDirectory() as tmp:
        process, base = processes.start_server(Path(tmp))
        try:
            processes.wait_ready(process, base, seconds=120)
            with processes.api_client(base, timeout=300) as http:
                rows, refused = walk(args, http)
        finally:
            processes.stop(process)
            signal.signal(signal.SIGTERM, previous)
    print(table(rows))
    missed = sum(1 for _, _, ci, t in rows if ci and t is not None and not ci[0] <= t <= ci[1])
    print(f"\nrefused patients: {refused}; intervals missing the truth: {missed} of "
          f"{sum(1 for r in rows if r[2] is not None)}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
