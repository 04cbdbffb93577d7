"""Defaults on data nobody tuned them on (issue 19): the product's recipe on public proxies.

For each proxy (``bench/proxies.py``: two real public tables and three built ones of other
shapes) and each target epsilon (0.5, 1, 3, 8), the product's own path runs on the proxy's
parts (train / calibration / evaluation by keyed coins, ``app.datasets.identity``):
``app.jobs.service.plan`` with a default request (only ``target_epsilon`` set), the worker's
``spec_of`` and ``train``, then ``worker.calibration.calibrate_model`` on the calibration part.
AUC and log-loss are then computed exactly on the evaluation part (public proxies: exact
figures are fine here; the service itself releases them with noise).

Baselines, fitted on the same encoded training rows (``bench/baselines.py``): non-private
logistic regression (scikit-learn, C = 1e4) and diffprivlib's epsilon-DP logistic regression.

Goals (issue 19): at epsilon 3, AUC at most 0.01 below non-private and log-loss at most 2%
above it, on every proxy; at epsilon 1, 0.02 and 5%; epsilon 0.5 accepted with defaults;
ahead of diffprivlib on mean and worst AUC at every epsilon. Each cell is the mean over
``seeds`` splits (a fresh coin secret each) with seeded DP noise, so a run is reproducible;
gaps are paired (same split, same rows).

    .venv/bin/python bench/proxy_study.py            # five proxies at full size (~3-4 min)
    .venv/bin/python bench/proxy_study.py --quick    # four proxies, smaller (< 2 min)
"""

import argparse
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import log_loss, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.errors import InvalidRequest  # noqa: E402
from app.datasets import identity, record_coins  # noqa: E402
from app.datasets.encoding import encoder_for  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from bench import baselines, proxies  # noqa: E402
from worker import training  # noqa: E402
from worker.calibration import calibrate_model  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

EPSILONS = (0.5, 1.0, 3.0, 8.0)
GOALS = {3.0: (0.01, 0.02), 1.0: (0.02, 0.05)}  # epsilon: (AUC gap, relative log-loss excess)
NAMES = ["breast_cancer", "fair", "crisis", "mixed", "wide"]


@dataclass(frozen=True)
class Config:
    names: list[str]
    scale: float  # of the built proxies' rows
    seeds: dict[str, int]


FULL = Config(NAMES, 1.0, {"breast_cancer": 20, "fair": 6, "crisis": 6, "mixed": 3, "wide": 2})
QUICK = Config(NAMES[:4], 0.2, {"breast_cancer": 4, "fair": 1, "crisis": 1, "mixed": 1})


@dataclass
class Parts:
    x: dict[identity.Part, np.ndarray]
    y: dict[identity.Part, np.ndarray]


@dataclass
class Cell:
    """One proxy at one epsilon, over seeds: [ours, non-private, diffprivlib] per metric."""

    auc: list[list[float]] = field(default_factory=lambda: [[], [], []])
    loss: list[list[float]] = field(default_factory=lambda: [[], [], []])
    epochs: set[int] = field(default_factory=set)
    clip: set[float] = field(default_factory=set)
    planned: list[float] = field(default_factory=list)
    refused: str | None = None


def split(proxy: proxies.Proxy, seed: int) -> Parts:
    secret = hashlib.sha256(f"proxy-study:{proxy.name}:{seed}".encode()).hexdigest()
    part = identity.parts_of(range(len(proxy.y)), secret,  # v1: comparable with
                             scheme=record_coins.BLAKE2B_V1)  # earlier runs' figures
    return Parts({p: proxy.x[part == p] for p in identity.Part},
                 {p: proxy.y[part == p] for p in identity.Part})


def dataset_for(proxy: proxies.Proxy, parts: Parts) -> Dataset:
    """The unsaved registration ``plan`` reads: row counts and the declared schema."""
    n = {p: len(parts.y[p]) for p in identity.Part}
    return Dataset(id=1, name=proxy.name, source_kind="upload", n_rows=sum(n.values()),
                   n_train=n[identity.Part.TRAIN], n_calibration=n[identity.Part.CALIBRATION],
                   seed=0, public=False, budget_delta=None,
                   schema_json=proxy.schema.model_dump(mode="json", by_alias=True))


@contextmanager
def seeded_noise(seed: int) -> Iterator[None]:
    """The worker's secret generators, seeded for a reproducible bench (public proxies only)."""
    original, counter = training.secret_generator, itertools.count()
    training.secret_generator = lambda device: torch.Generator(device=device).manual_seed(
        seed * 1_000 + next(counter))
    try:
        yield
    finally:
        training.secret_generator = original


def metrics(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(roc_auc_score(y, p)), float(log_loss(y, p, labels=[0, 1]))


def ours(proxy: proxies.Proxy, parts: Parts, epsilon: float, seed: int,
         overrides: dict[str, Any], cell: Cell) -> tuple[float, float] | None:
    """Plan, train, calibrate as the worker does; None (and the reason kept) when refused."""
    T, C, E = identity.Part  # noqa: N806
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": epsilon},
                                        "training": {"seed": seed, **overrides}})
    try:
        job = job_service.plan(dataset=dataset_for(proxy, parts), request=request)
    except InvalidRequest as refused:
        cell.refused = str(refused)
        return None
    planned = job_service.planned_epsilon(job)["prv"]
    cell.epochs.add(job.epochs)
    cell.clip.add(job.max_grad_norm)
    cell.planned.append(planned if planned is not None else float("inf"))
    encoder, spec = encoder_for(proxy.schema), spec_of(job)
    with seeded_noise(seed):
        result = training.train(parts.x[T], parts.y[T], spec, device=torch.device("cpu"),
                                encoder=encoder)
    history = [Mechanism(*step) for step in result.history]
    eps_prv, _ = training.epsilon_of(result.history, spec.delta)
    calibrate_model(result.network, parts.x[C], parts.y[C], history=history, delta=spec.delta,
                    training_epsilon=eps_prv, rng=np.random.default_rng(seed), encoder=encoder)
    return metrics(parts.y[E], training.predict_proba(result.network, parts.x[E], encoder))


def run_proxy(proxy: proxies.Proxy, seeds: int, overrides: dict[str, Any]) -> dict[float, Cell]:
    T, _, E = identity.Part  # noqa: N806
    cells = {eps: Cell() for eps in EPSILONS}
    encoder = encoder_for(proxy.schema)
    norm = baselines.public_row_norm(encoder.n_players)
    for seed in range(seeds):
        parts = split(proxy, seed)
        x_train, x_eval = encoder.encode(parts.x[T]), encoder.encode(parts.x[E])
        coef, bias = baselines.non_private_fit(x_train, parts.y[T])
        np_figures = metrics(parts.y[E], baselines.sigmoid(x_eval @ coef + bias))
        for eps, cell in cells.items():
            figures = ours(proxy, parts, eps, seed, overrides, cell)
            if figures is None:
                continue
            coef_dp, bias_dp = baselines.diffprivlib_fit(
                x_train, parts.y[T], epsilon=eps, data_norm=norm, seed=seed)
            dpl = metrics(parts.y[E], baselines.sigmoid(x_eval @ coef_dp + bias_dp))
            for k, (auc, loss) in enumerate((figures, np_figures, dpl)):
                cell.auc[k].append(auc)
                cell.loss[k].append(loss)
    return cells


def verdict(eps: float, cell: Cell) -> str:
    if cell.refused is not None or not cell.auc[0]:
        return "refused"
    if eps == 0.5:
        return "yes" if max(cell.planned) <= 0.5 + 1e-9 else "no"
    if eps not in GOALS:
        return "-"
    gap, excess = GOALS[eps]
    ok = auc_gap(cell) <= gap and loss_excess(cell) <= excess
    return "yes" if ok else "no"


def auc_gap(cell: Cell) -> float:
    return float(np.mean(np.subtract(cell.auc[1], cell.auc[0])))


def loss_excess(cell: Cell) -> float:
    return float(np.mean(cell.loss[0]) / np.mean(cell.loss[1]) - 1.0)


def print_proxy(proxy: proxies.Proxy, cells: dict[float, Cell], seeds: int) -> None:
    enc = encoder_for(proxy.schema)
    print(f"\n### {proxy.name}: {len(proxy.y):,} rows, {enc.n_players} features "
          f"({enc.n_inputs} inputs), prevalence {proxy.y.mean():.1%}, {seeds} seeds"
          f"{' (real public table)' if proxy.real else ''}: {proxy.note}\n")
    print("| ε | epochs | C | ours AUC | ours LL | non-priv AUC | non-priv LL | diffprivlib AUC "
          "| diffprivlib LL | AUC gap | LL excess | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for eps, cell in cells.items():
        if not cell.auc[0]:
            print(f"| {eps:g} | refused: {cell.refused} |")
            continue
        a, ll = [np.mean(v) for v in cell.auc], [np.mean(v) for v in cell.loss]
        epochs = "/".join(str(e) for e in sorted(cell.epochs))
        clip = "/".join(f"{c:g}" for c in sorted(cell.clip))
        print(f"| {eps:g} | {epochs} | {clip} | {a[0]:.4f} | {ll[0]:.4f} | {a[1]:.4f} | "
              f"{ll[1]:.4f} | {a[2]:.4f} | {ll[2]:.4f} | {auc_gap(cell):+.4f} | "
              f"{loss_excess(cell):+.1%} | {verdict(eps, cell)} |")


def print_summary(results: dict[str, dict[float, Cell]]) -> None:
    print("\n### Summary (means over seeds; mean and worst over proxies)\n")
    print("| ε | ours mean AUC | diffprivlib mean AUC | ours worst gap | diffprivlib worst gap "
          "| ahead on mean and worst | goals held |")
    print("|---|---|---|---|---|---|---|")
    for eps in EPSILONS:
        cells = [r[eps] for r in results.values() if r[eps].auc[0]]
        if not cells:
            print(f"| {eps:g} | refused everywhere |")
            continue
        mean_ours = np.mean([np.mean(c.auc[0]) for c in cells])
        mean_dpl = np.mean([np.mean(c.auc[2]) for c in cells])
        worst_ours = max(auc_gap(c) for c in cells)
        worst_dpl = max(float(np.mean(np.subtract(c.auc[1], c.auc[2]))) for c in cells)
        ahead = mean_ours > mean_dpl and worst_ours < worst_dpl
        verdicts = [verdict(eps, r[eps]) for r in results.values()]
        held = "-" if all(v == "-" for v in verdicts) else (
            f"{verdicts.count('yes')} of {len(verdicts)}")
        print(f"| {eps:g} | {mean_ours:.4f} | {mean_dpl:.4f} | {worst_ours:+.4f} | "
              f"{worst_dpl:+.4f} | {'yes' if ahead else 'no'} | {held} |")


def main(argv: list[str] | None = None) -> dict[str, dict[float, Cell]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="four smaller proxies, < 2 min")
    parser.add_argument("--proxies", help="comma-separated subset of " + ",".join(NAMES))
    parser.add_argument("--seeds", type=int, help="seeds per proxy (default: the config's)")
    parser.add_argument("--training", default="{}",
                        help="JSON overrides of the request's training block (exploration)")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    names = args.proxies.split(",") if args.proxies else config.names
    overrides = json.loads(args.training)
    torch.set_num_threads(2)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started, results = time.perf_counter(), {}
    print(f"Recipe: the request's defaults{f' with {overrides}' if overrides else ''}; "
          "delta: the service's default for the row count")
    for proxy in proxies.build(names, scale=config.scale):
        seeds = args.seeds or config.seeds.get(proxy.name, 1)
        results[proxy.name] = run_proxy(proxy, seeds, overrides)
        print_proxy(proxy, results[proxy.name], seeds)
    print_summary(results)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
