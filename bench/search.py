"""An accounted hyper-parameter search against the defaults, at equal total epsilon.

For each table and target epsilon, on the same parts (keyed coins, as ``bench/proxy_study.py``)
and the same seeded DP noise:

* defaults: ``app.jobs.service.plan`` with only ``target_epsilon``, then the worker's training
  and DP calibration (one run at the whole budget);
* search: the same request with ``search`` (the public grid ``GRID``, ``--runs``, mean
  ``--mean-runs``): ``plan`` finds the per-run noise at which the whole repeat-and-select
  release meets the same target, then the worker's own loop (``worker.search.best_of_runs``:
  M runs whatever K, candidates drawn uniformly, each scored by its DP calibration release,
  the best of the first K kept) and the best run's own calibration.

Both charge the same target: the total epsilon printed is each plan's ledger figure (PLD for the
defaults, RDP for the search: PLD has no repeat-and-select). AUC and log-loss are exact, on the
evaluation part (public tables: exact figures are fine here). The number of runs a search
executed (M, public) is printed. Every draw is seeded (the DP
noise, the calibration's, K and the candidates), so a run repeats.

    .venv/bin/python bench/search.py            # generator (20,000 rows) + breast cancer, 5 seeds
    .venv/bin/python bench/search.py --quick    # generator (8,000 rows) only, 2 seeds
    .venv/bin/python bench/search.py --runs poisson   # K Poisson (K = 0: nothing released)

The last line is a ``key=value`` summary: mean AUC and log-loss differences (search minus
defaults) per epsilon over the tables.
"""

import argparse
import hashlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.errors import InvalidRequest  # noqa: E402
from app.datasets import record_coins  # noqa: E402
from app.datasets.parts import PartRows, Split  # noqa: E402
from app.datasets.patients import identity
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.flows.job_run import LoadedData  # noqa: E402
from app.jobs import search as job_search  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.models import Job  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import proxies  # noqa: E402
from bench.proxy_study import Parts, dataset_for, seeded_noise  # noqa: E402
from worker import search as worker_search  # noqa: E402
from worker import training  # noqa: E402
from worker.calibration import calibrate_model, size_floor_rows  # noqa: E402
from worker.tasks import JobWorker, spec_of  # noqa: E402

EPSILONS = (1.0, 3.0, 8.0)
GRID: list[dict[str, Any]] = [
    {},  # the defaults themselves
    {"learning_rate": 0.1},
    {"learning_rate": 1.0},
    {"optimizer": "sgd"},
    {"tail_average": 0.0},
    {"model": "mlp", "hidden_units": 8},
]


@dataclass
class Cell:
    """One table at one epsilon, over seeds: per recipe (defaults, search) AUC, loss, epsilon."""

    auc: dict[str, list[float]] = field(default_factory=lambda: {"defaults": [], "search": []})
    loss: dict[str, list[float]] = field(default_factory=lambda: {"defaults": [], "search": []})
    eps: dict[str, list[float]] = field(default_factory=lambda: {"defaults": [], "search": []})
    runs: list[int] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)


def split(proxy: proxies.Proxy, seed: int) -> Parts:
    """The proxy's parts by keyed coins (the secret a public function of the seed)."""
    secret = hashlib.sha256(f"search-bench:{proxy.name}:{seed}".encode()).hexdigest()
    part = identity.parts_of(range(len(proxy.y)), secret, scheme=record_coins.BLAKE2B_V1)
    return Parts({p: proxy.x[part == p] for p in identity.Part},
                 {p: proxy.y[part == p] for p in identity.Part})


def metrics(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(roc_auc_score(y, p)), float(log_loss(y, p, labels=[0, 1]))


def planned(proxy: proxies.Proxy, parts: Any, cell: Cell, label: str,
            request: JobCreate) -> Job | None:
    """The job the service plans for ``request`` on the proxy, its planned epsilon kept under
    ``label``; None (and said) when refused."""
    try:
        job = job_service.plan(dataset=dataset_for(proxy, parts), request=request)
    except InvalidRequest as refused:
        print(f"  {label} refused at epsilon {request.privacy.target_epsilon:g}: {refused}")
        return None
    cell.eps[label].append(job_service.planned_epsilon(job)["prv"] or float("inf"))
    return job


def defaults_run(proxy: proxies.Proxy, parts: Parts, epsilon: float, seed: int,
                 cell: Cell) -> tuple[float, float] | None:
    """The defaults as the worker runs them: plan, train, the DP calibration; None: refused."""
    T, C, E = identity.Part  # noqa: N806
    job = planned(proxy, parts, cell, "defaults", JobCreate.model_validate({
        "dataset_id": 1, "privacy": {"target_epsilon": epsilon}, "training": {"seed": seed}}))
    if job is None:
        return None
    encoder, spec = encoder_for(proxy.schema), spec_of(job)
    with seeded_noise(seed):
        result = training.train(parts.x[T], parts.y[T], spec, device=torch.device("cpu"),
                                encoder=encoder)
    run = [Mechanism(spec.noise_multiplier, spec.sample_rate, spec.steps)]
    eps = training.epsilon_of(result.history, spec.delta)[0]
    noise = held_out_noise(run, [spec.delta], lambda delta: training.epsilon_of(
        result.history, delta)[0])
    if len(parts.y[C]) >= size_floor_rows(noise):  # calibrate_if_meaningful's rule, seeded
        calibrate_model(result.network, parts.x[C], parts.y[C], history=run, delta=spec.delta,
                        training_epsilon=eps, noise_multiplier=noise, encoder=encoder,
                        rng=np.random.default_rng(seed))
    return metrics(parts.y[E], training.predict_proba(result.network, parts.x[E], encoder))


class BenchWorker:
    """What ``worker.search.one_run`` reads of a worker: no lease, never stopping, the CPU."""

    heartbeat = None
    stop_requested = threading.Event()
    device = torch.device("cpu")


def _rows(x: np.ndarray, y: np.ndarray) -> PartRows:
    return PartRows(x=x, y=y, groups={}, rows=len(y))


def search_run(proxy: proxies.Proxy, parts: Any, epsilon: float, seed: int, runs: str,
               mean: float, cell: Cell) -> tuple[float, float] | None:
    """The search's plan and the worker's loop on the proxy's parts; None when refused."""
    T, C, E = identity.Part  # noqa: N806
    job = planned(proxy, parts, cell, "search", JobCreate.model_validate({
        "dataset_id": 1, "privacy": {"target_epsilon": epsilon}, "training": {"seed": seed},
        "search": {"candidates": GRID, "runs": runs, "mean_runs": mean}}))
    if job is None:
        return None
    plan, spec = job_search.stored_plan(job.training), spec_of(job)
    assert plan is not None
    encoder = encoder_for(proxy.schema)
    loaded = LoadedData(split=Split(_rows(parts.x[T], parts.y[T]), _rows(parts.x[C], parts.y[C]),
                                    _rows(parts.x[E], parts.y[E])),
                        encoder=encoder, ledger_deltas=())
    noise = worker_search.held_out_noise_of(spec, loaded.held_out_deltas(spec.delta))
    rng = np.random.default_rng(seed)
    drawn: list[int] = []

    def count_run() -> None:  # asked before each run: counts the M executed, whatever K
        drawn.append(1)

    executed = job_search.executed_of(plan, job_search.run_event(
        spec.kind, spec.noise_multiplier, spec.sample_rate, spec.steps), spec.delta)
    with seeded_noise(seed):
        best = worker_search.best_of_runs(cast(JobWorker, BenchWorker()), loaded, spec, plan,
                                          noise, rng, count_run, executed.runs)
    cell.runs.append(len(drawn))
    if best is None:  # K = 0 (Poisson): nothing released; scored as the base rate
        base = float(np.mean(parts.y[C]))
        return metrics(parts.y[E], np.full(len(parts.y[E]), base))
    cell.chosen.append(best.candidate)
    worker_search.kept_calibration(best, noise)
    return metrics(parts.y[E], training.predict_proba(best.result.network, parts.x[E], encoder))


def run_table(proxy: proxies.Proxy, seeds: int, runs: str, mean: float,
              epsilons: tuple[float, ...] = EPSILONS) -> dict[float, Cell]:
    cells = {eps: Cell() for eps in epsilons}
    for seed in range(seeds):
        parts = split(proxy, seed)
        for eps in epsilons:
            cell = cells[eps]
            default = defaults_run(proxy, parts, eps, seed, cell)
            found = search_run(proxy, parts, eps, seed, runs, mean, cell)
            if default is None or found is None:
                continue
            for name, (auc, loss) in (("defaults", default), ("search", found)):
                cell.auc[name].append(auc)
                cell.loss[name].append(loss)
    return cells


def print_table(name: str, cells: dict[float, Cell]) -> None:
    print(f"\n{name}")
    print(f"{'eps':>4} {'recipe':>8} {'AUC':>7} {'worst':>7} {'logloss':>8} {'worst':>7} "
          f"{'total eps':>9}  runs executed / candidates chosen")
    for eps, cell in cells.items():
        for recipe in ("defaults", "search"):
            auc, loss = cell.auc[recipe], cell.loss[recipe]
            if not auc:
                continue
            extra = (f"  {cell.runs} / {cell.chosen}" if recipe == "search" else "")
            print(f"{eps:4g} {recipe:>8} {np.mean(auc):7.4f} {np.min(auc):7.4f} "
                  f"{np.mean(loss):8.4f} {np.max(loss):7.4f} {max(cell.eps[recipe]):9.4f}{extra}")


def main(argv: list[str] | None = None) -> dict[str, dict[float, Cell]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", default="truncated_negative_binomial",
                        choices=["poisson", "truncated_negative_binomial"])
    parser.add_argument("--mean-runs", type=float, default=3.0)
    parser.add_argument("--rows", type=int, default=None, help="the generator's rows")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    args = parser.parse_args(argv)
    rows = args.rows or (8_000 if args.quick else 20_000)
    tables = ([proxies.crisis(rows)] if args.quick or args.rows
              else [proxies.crisis(rows), *proxies.build(["breast_cancer"])])
    seeds = args.seeds or (2 if args.quick else 5)
    epsilons = tuple(args.epsilons)
    print(f"search: {len(GRID)} candidates {GRID}, runs {args.runs}, mean {args.mean_runs:g}; "
          f"{seeds} seeds; exact AUC / log-loss on the evaluation part")
    started, results = time.perf_counter(), {}
    for proxy in tables:
        results[proxy.name] = run_table(proxy, seeds, args.runs, args.mean_runs, epsilons)
        print_table(f"{proxy.name} ({len(proxy.y)} rows)", results[proxy.name])
    summary = [f"seconds={time.perf_counter() - started:.0f}"]
    for eps in epsilons:
        gaps = [(np.mean(c.auc["search"]) - np.mean(c.auc["defaults"]),
                 np.mean(c.loss["search"]) - np.mean(c.loss["defaults"]))
                for c in (r[eps] for r in results.values()) if c.auc["search"]]
        if gaps:
            summary.append(f"auc_gain_eps{eps:g}={np.mean([g[0] for g in gaps]):+.4f}")
            summary.append(f"logloss_change_eps{eps:g}={np.mean([g[1] for g in gaps]):+.4f}")
    print(" ".join(summary))
    return results


if __name__ == "__main__":
    main()
