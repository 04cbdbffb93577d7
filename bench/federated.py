"""Federation benchmark: a federated model beside each clinic alone and pooled DP.

Everything runs through the real service: a coordinator (``dpcrisis serve`` plus
``dpcrisis federation-coordinator``), three clinics (``bench/clinics.py``'s ``CLINICS``:
20,000 / 4,000 / 800 rows, the middle one with the generator's ``subgroup_effect``) and one
extra service for pooled training, each its own process on loopback with its own SQLite
database. At each per-record epsilon (1 and 3, delta 1e-6 from each dataset's budget):

- federated: a new federation of the recipe's defaults (20 rounds x 50 local steps unless told),
  every clinic joins with its dataset; each clinic's model is the same global weights with the
  clinic's own DP calibration;
- alone: a default single-site job (``POST /v1/jobs``) at each clinic;
- pooled: a default job on the three clinics' rows uploaded as one dataset (central DP).

Where the recipe's full-batch steps cannot reach a target within the largest allowed noise
(epsilon 1 at 1,000 steps), the bench federates fewer rounds, as a declaration that leaves the
rounds out does (``FederatedRecipe``'s default rounds; explicit rounds beyond the cap are
refused at a site's join, 422).

Each model is scored by its service (``/v1/risk/batch``: the calibrated probabilities it
serves) on fresh rows of each clinic's generator (``bench/federated_data.py`` lists the seeds);
exact AUC and log-loss on those public rows. Goals: federated within 0.01 AUC of pooled, and at
least 0.02 AUC above the smallest clinic alone (its model scored on every clinic's held-out rows).
Every model is trained ``--repeats`` times (fresh DP noise, same rows): one 800-row model's
AUC moves by a few hundredths from one noise draw to the next, so one draw cannot decide.

    .venv/bin/python bench/federated.py            # 5 repeats (about 5 minutes on 2 cores)
    .venv/bin/python bench/federated.py --quick    # 4 rounds x 25 steps, 5,000 rows, 1 repeat
    .venv/bin/python bench/federated.py --weights rows   # diagnostic: FedAvg by row counts
    .venv/bin/python bench/federated.py --secure   # every round through SecAgg+

The last line is ``federated_auc=A pooled_auc=P smallest_alone_auc=S`` at epsilon 3.
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import synthetic  # noqa: E402
from app.federation.schemas import FederatedRecipe, rounds_within_cap  # noqa: E402
from bench import clinics, processes  # noqa: E402
from bench import federated_data as data  # noqa: E402
from bench.clinics import CLINICS, Service  # noqa: E402

EPSILONS = (1.0, 3.0)
DELTA = 1e-6
BUDGET_PER_REPEAT = 8.0
"""Each dataset's (and each service's per-patient) budget epsilon per repeat: federated + alone
at epsilon 3 and at 1 fit in it (the ledgers' Renyi filters); the same rows train every repeat."""
WITHIN_POOLED, ABOVE_SMALLEST = 0.01, 0.02
ROUND_TIMEOUT = 120.0  # the recipe's default
JOB_SECONDS = 1_500.0
START_SECONDS = 600.0
"""How long the five services, started together, may take to answer /readyz: each imports
torch and migrates its database on the same few cores, which a loaded machine stretches."""
SMALLEST = min(CLINICS, key=lambda clinic: clinic[1])[0]
KINDS = ("federated", "alone", "pooled")


@dataclass
class Cluster:
    """The running services and the datasets registered on them."""

    coordinator: Service
    sites: dict[str, Service]
    pooled: Service
    datasets: dict[str, int]  # clinic name -> its dataset id at its own service
    pooled_dataset: int = 0
    budget: float = BUDGET_PER_REPEAT

    def all(self) -> list[Service]:
        return [self.coordinator, *self.sites.values(), self.pooled]


@dataclass(frozen=True)
class Plan:
    """What every repeat runs: the federation's rounds and local steps, FedAvg's weights."""

    rounds: int
    local_steps: int
    weights: str
    secure: bool = False


def start(root: Path, stack: ExitStack) -> Cluster:
    """Every service, ready; each one is stopped by ``stack`` (with the Flower servers started
    on it) however the bench ends, a service that never became ready included."""

    def started(name: str) -> Service:
        service = clinics.start(root / name)
        stack.callback(service.stop)
        return service

    coordinator = started("coordinator")
    sites = {name: started(name) for name, _, _ in CLINICS}
    cluster = Cluster(coordinator, sites, started("pooled"), {})
    clinics.wait_ready(*cluster.all(), seconds=START_SECONDS)
    return cluster


def register_all(cluster: Cluster, tables: dict[str, synthetic.SyntheticTable]) -> None:
    """Each clinic's synthetic source at its own service; the union uploaded to the pooled one.
    Every service's per-patient budget is raised with the datasets' (the default, 8, would cap
    the repeats: each model's own guarantee is its per-record epsilon)."""
    for service in (*cluster.sites.values(), cluster.pooled):
        with service.http() as admin:
            raised = admin.put("/v1/patient-budget",
                               json={"epsilon": cluster.budget, "delta": DELTA})
        _expect(raised.status_code == 200, f"patient budget: {raised.text[:500]}")
    for name, rows, shift in CLINICS:
        source: dict[str, Any] = {"kind": "synthetic", "n_rows": rows,
                                  "seed": data.CLINIC_SEEDS[name]}
        if shift is not None:
            source["shift"] = shift
        cluster.datasets[name] = _create(cluster.sites[name], cluster.budget,
                                         {"name": name, "source": source})
    cluster.pooled_dataset = _create(cluster.pooled, cluster.budget, {
        "name": "pooled", "source": {"kind": "upload"}, "schema": data.pooled_schema()})
    with processes.api_client(cluster.pooled.base, cluster.pooled.keys["data_steward"],
                              300) as steward:
        sent = steward.put(f"/v1/datasets/{cluster.pooled_dataset}/data",
                           content=data.union_csv(tables), headers={"Content-Type": "text/csv"})
    _expect(sent.status_code == 200, f"pooled upload: {sent.text[:500]}")


def _create(service: Service, budget: float, body: dict[str, Any]) -> int:
    with service.http("data_steward") as steward:
        made = steward.post("/v1/datasets", json={
            **body, "privacy_budget": {"epsilon": budget, "delta": DELTA}})
    _expect(made.status_code == 201, f"dataset {body['name']}: {made.text[:500]}")
    return int(made.json()["id"])


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise SystemExit(f"bench/federated.py: {message}")


def rounds_for(epsilon: float, rounds: int, local_steps: int) -> int:
    """The most rounds (at most ``rounds``, which ``--rounds`` may set above the default 20)
    whose full-batch steps reach ``epsilon`` within the largest allowed noise: the rule of the
    recipe's default rounds, here for any ``rounds``."""
    fits = rounds_within_cap(target_epsilon=epsilon, local_steps=local_steps, delta=DELTA,
                             most=rounds)
    _expect(fits is not None, f"epsilon {epsilon:g}: not even one round of {local_steps} steps")
    return int(fits or 0)


def federate(cluster: Cluster, epsilon: float, rounds: int, plan: Plan, name: str
             ) -> tuple[subprocess.Popen[str], int, dict[str, int]]:
    """Declare a new federation at the coordinator and every clinic, start Flower's server and
    join each clinic's dataset: (the server, the federation id, clinic -> its job id)."""
    address = clinics.address()

    def body(role: str, site: str | None) -> dict[str, Any]:
        made = clinics.federation_body(role=role, address=address, site=site, rounds=rounds,
                                       local_steps=plan.local_steps, epsilon=epsilon,
                                       timeout=ROUND_TIMEOUT)
        made["recipe"]["secure_aggregation"] = plan.secure
        if plan.weights == "rows":  # a diagnostic: the bench's row counts are public here
            made["sites"] = [{"name": n, "weight": float(r)} for n, r, _ in CLINICS]
        return {**made, "name": name}

    federation_id = clinics.declare(cluster.coordinator, body("coordinator", None))
    server = clinics.coordinate(cluster.coordinator, federation_id)
    jobs = {}
    for name, site in cluster.sites.items():
        here = clinics.declare(site, body("site", name))
        joined = clinics.join(site, here, cluster.datasets[name])
        _expect(joined.status_code == 202, f"{name} joining: {joined.text[:500]}")
        jobs[name] = int(joined.json()["id"])
    return server, federation_id, jobs


def submit(service: Service, dataset_id: int, epsilon: float) -> int:
    """A default single-site job at ``epsilon``."""
    with service.http("data_scientist") as scientist:
        made = scientist.post("/v1/jobs", json={"dataset_id": dataset_id,
                                                "privacy": {"target_epsilon": epsilon}})
    _expect(made.status_code == 202, f"job on dataset {dataset_id}: {made.text[:500]}")
    return int(made.json()["id"])


def model_of(service: Service, job_id: int, what: str) -> int:
    job = clinics.job_when_final(service, job_id, seconds=JOB_SECONDS)
    _expect(job["status"] == "succeeded", f"{what} job {job_id}: {job}")
    return int(job["model_id"])


def train(cluster: Cluster, epsilon: float, plan: Plan, repeat: int
          ) -> tuple[dict[str, dict[str, int]], dict[str, Any]]:
    """Every model at ``epsilon``: {kind: {clinic: model id}} (pooled under ``"pooled"``), and
    the coordinator's report. The clinics' workers take the federated job, then the alone one
    (the queue is first in, first out); the pooled service trains meanwhile."""
    rounds = rounds_for(epsilon, plan.rounds, plan.local_steps)
    if rounds < plan.rounds and repeat == 0:
        print(f"\nepsilon {epsilon:g}: {plan.rounds} x {plan.local_steps} full-batch steps need "
              f"more than the largest allowed noise; federating {rounds} rounds "
              f"({rounds * plan.local_steps} steps), as the single-site default plans fewer steps")
    name = f"bench-e{epsilon:g}-r{repeat}".replace(".", "-")
    server, federation_id, federated = federate(cluster, epsilon, rounds, plan, name)
    alone = {name: submit(site, cluster.datasets[name], epsilon)
             for name, site in cluster.sites.items()}
    pooled = submit(cluster.pooled, cluster.pooled_dataset, epsilon)
    models: dict[str, dict[str, int]] = {
        "federated": {n: model_of(cluster.sites[n], j, "federated") for n, j in federated.items()},
        "alone": {n: model_of(cluster.sites[n], j, "alone") for n, j in alone.items()},
        "pooled": {"pooled": model_of(cluster.pooled, pooled, "pooled")},
    }
    code = server.wait(timeout=ROUND_TIMEOUT)
    log = (cluster.coordinator.root / "coordinator.log").read_text(errors="replace")
    _expect(code == 0, f"coordinator exited {code}: {log[-3000:]}")
    with cluster.coordinator.http() as admin:
        report = admin.get(f"/v1/federations/{federation_id}").json()["report"]
    return models, report


Scores = dict[str, dict[str, tuple[float, float]]]
"""kind -> clinic whose held-out rows -> (AUC, log-loss)."""


def evaluate(cluster: Cluster, models: dict[str, dict[str, int]],
             held: dict[str, synthetic.SyntheticTable]) -> Scores:
    """Score each model on its clinic's held-out rows (pooled, and the smallest clinic alone,
    on every clinic's)."""
    scores: Scores = {kind: {} for kind in (*KINDS, "smallest_alone")}
    for name, table in held.items():
        site = cluster.sites[name]
        with site.http("clinician") as http:
            for kind in ("federated", "alone"):
                scores[kind][name] = data.metrics(
                    table.y, data.score(http, models[kind][name], table.x))
        with cluster.pooled.http("clinician") as http:
            scores["pooled"][name] = data.metrics(
                table.y, data.score(http, models["pooled"]["pooled"], table.x))
        if name == SMALLEST:
            scores["smallest_alone"][name] = scores["alone"][name]
            continue
        with cluster.sites[SMALLEST].http("clinician") as http:
            scores["smallest_alone"][name] = data.metrics(
                table.y, data.score(http, models["alone"][SMALLEST], table.x))
    return scores


def mean(scores: dict[str, tuple[float, float]], index: int = 0) -> float:
    """The average over clinics (equal held-out sizes: the weighted mean is the plain one)."""
    return float(np.mean([figures[index] for figures in scores.values()]))


def average(runs: list[Scores]) -> Scores:
    """Each (kind, clinic)'s AUC and log-loss averaged over the repeats."""
    return {kind: {name: (float(np.mean([r[kind][name][0] for r in runs])),
                          float(np.mean([r[kind][name][1] for r in runs])))
                   for name in clinic_scores}
            for kind, clinic_scores in runs[0].items()}


def print_table(scores: Scores, held: dict[str, synthetic.SyntheticTable]) -> None:
    print("\n| clinic | rows | held-out Bayes AUC | federated AUC | log-loss | alone AUC | "
          "log-loss | pooled AUC | log-loss |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    sizes = {name: rows for name, rows, _ in CLINICS}
    for name, table in held.items():
        bayes = data.metrics(table.y, table.p)[0]
        cells = " | ".join(f"{scores[k][name][0]:.4f} | {scores[k][name][1]:.4f}"
                           for k in KINDS)
        print(f"| {name} | {sizes[name]:,} | {bayes:.4f} | {cells} |")
    means = " | ".join(f"{mean(scores[k]):.4f} | {mean(scores[k], 1):.4f}" for k in KINDS)
    print(f"| mean | | | {means} |")
    small = scores["smallest_alone"]
    print(f"\n{SMALLEST} alone on every clinic's held-out rows: " + ", ".join(
        f"{name} {auc:.4f} (log-loss {loss:.4f})" for name, (auc, loss) in small.items())
        + f"; mean AUC {mean(small):.4f}")


def print_epsilon(epsilon: float, runs: list[Scores], held: dict[str, synthetic.SyntheticTable],
                  reports: list[dict[str, Any]], seconds: list[float]) -> None:
    print(f"\n## per-record epsilon {epsilon:g} (delta {DELTA:g}): mean of {len(runs)} "
          f"repeat(s), training {np.mean(seconds):.0f} s each")
    scores = average(runs)
    print_table(scores, held)
    for kind in (*KINDS, "smallest_alone"):
        print(f"per repeat, {kind} AUC (mean over clinics): "
              + ", ".join(f"{mean(r[kind]):.4f}" for r in runs))
    rounds = [x for r in reports for x in r["rounds"]]
    full = sum(len(x["sites"]) == len(CLINICS) for x in rounds)
    print("coordinator's DP evaluation of the federated model (summed noisy histograms), "
          "roc_auc: " + ", ".join(str((r.get("evaluation") or {}).get("roc_auc"))
                                  for r in reports)
          + f"; rounds with every site: {full} of {len(rounds)}; federation epsilon "
          f"{reports[-1].get('federation_epsilon')}")
    gaps = [mean(r["federated"]) - mean(r["pooled"]) for r in runs]
    gains = [mean(r["federated"]) - mean(r["smallest_alone"]) for r in runs]
    gap, gain = float(np.mean(gaps)), float(np.mean(gains))
    print(f"goal: federated within {WITHIN_POOLED} AUC of pooled: {gap:+.4f} "
          f"{'PASS' if gap >= -WITHIN_POOLED else 'FAIL'} (met in "
          f"{sum(g >= -WITHIN_POOLED for g in gaps)} of {len(gaps)} repeats)")
    print(f"goal: federated at least {ABOVE_SMALLEST} AUC above {SMALLEST} alone: "
          f"{gain:+.4f} {'PASS' if gain >= ABOVE_SMALLEST else 'FAIL'} (met in "
          f"{sum(g >= ABOVE_SMALLEST for g in gains)} of {len(gains)} repeats)")


def arguments() -> argparse.Namespace:
    recipe = FederatedRecipe(target_epsilon=3.0)  # its defaults, rounds uncut
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="4 rounds x 25 local steps, 5,000 held-out rows, 1 repeat")
    parser.add_argument("--rounds", type=int, default=recipe.rounds)
    parser.add_argument("--local-steps", type=int, default=recipe.local_steps)
    parser.add_argument("--held-out", type=int, default=20_000, help="fresh rows per clinic")
    parser.add_argument("--weights", choices=("equal", "rows"), default="equal",
                        help="FedAvg's public site weights: equal (the default declaration) "
                        "or the row counts (a diagnostic)")
    parser.add_argument("--secure", action="store_true",
                        help="every round through SecAgg+ (recipe.secure_aggregation)")
    parser.add_argument("--repeats", type=int, default=5, choices=range(1, 13),
                        metavar="1..12", help="fresh DP noise for every model, same rows")
    parser.add_argument("--root", type=Path, default=None,
                        help="keep the services' databases and logs here (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.local_steps, args.held_out, args.repeats = 4, 25, 5_000, 1
    return args


def collect(cluster: Cluster, plan: Plan, repeats: int,
            held: dict[str, synthetic.SyntheticTable]) -> None:
    """Train and score every repeat at every epsilon, then print each epsilon's figures and the
    last line (epsilon 3, mean over clinics and repeats)."""
    runs: dict[float, list[Scores]] = {e: [] for e in EPSILONS}
    reports: dict[float, list[dict[str, Any]]] = {e: [] for e in EPSILONS}
    seconds: dict[float, list[float]] = {e: [] for e in EPSILONS}
    for repeat in range(repeats):
        for epsilon in EPSILONS:
            started = time.monotonic()
            models, report = train(cluster, epsilon, plan, repeat)
            seconds[epsilon].append(time.monotonic() - started)
            runs[epsilon].append(evaluate(cluster, models, held))
            reports[epsilon].append(report)
            print(f"repeat {repeat + 1}, epsilon {epsilon:g}: " + ", ".join(
                f"{k} {mean(runs[epsilon][-1][k]):.4f}" for k in (*KINDS, "smallest_alone")),
                flush=True)
    for epsilon in EPSILONS:
        print_epsilon(epsilon, runs[epsilon], held, reports[epsilon], seconds[epsilon])
    final = average(runs[EPSILONS[-1]])
    print(f"\nfederated_auc={mean(final['federated']):.4f} pooled_auc={mean(final['pooled']):.4f}"
          f" smallest_alone_auc={mean(final['smallest_alone']):.4f}")


def run(args: argparse.Namespace, root: Path) -> None:
    tables = {name: data.clinic_table(name, rows, shift) for name, rows, shift in CLINICS}
    held = {name: data.held_out(name, shift, args.held_out) for name, _, shift in CLINICS}
    print(f"# {len(CLINICS)} clinics ({', '.join(f'{n} {r:,}' for n, r, _ in CLINICS)} rows; "
          f"shifts {[s for _, _, s in CLINICS]}); federated {args.rounds} rounds x "
          f"{args.local_steps} local steps, {args.weights} FedAvg weights"
          f"{', SecAgg+' if args.secure else ''}; {args.held_out:,} "
          f"fresh held-out rows per clinic, scored by each service's /v1/risk/batch; "
          f"{args.repeats} repeat(s) of every model", flush=True)
    with ExitStack() as stack:
        cluster = start(root, stack)
        cluster.budget = BUDGET_PER_REPEAT * args.repeats
        register_all(cluster, tables)
        collect(cluster, Plan(args.rounds, args.local_steps, args.weights, args.secure),
                args.repeats, held)


def _exit(signum: int, _frame: object) -> None:
    """A SIGTERM (a CI timeout, ``kill``) unwinds like an error: the services are stopped."""
    raise SystemExit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGTERM, _exit)
    args = arguments()
    if args.root is not None:
        run(args, args.root)
        return
    with tempfile.TemporaryDirectory(prefix="bench-federated-") as root:
        run(args, Path(root))


if __name__ == "__main__":
    main()
