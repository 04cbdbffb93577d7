"""Audited against accounted epsilon: the privacy audit of the service's default recipe.

For target epsilon 1, 3, 8 and non-private, on a public proxy dataset (8,000 rows, 5,600 of
them training, delta 1e-5), the audit the worker runs for ``POST /v1/audits``
(``worker.privacy_audit.audit.run``) with the job's exact settings: full batch (q = 1), 500
steps, clip 0.5, SGD lr 0.5 momentum 0.9, tail average 0.5, logistic model. Printed per epsilon:
the accountant's epsilon (PRV; exact Gaussian at q = 1), the white-box and black-box one-run
lower bounds at 95% confidence (jointly), the noise multiplier the excluded gradient canaries
measured, the attacks' ROC-AUC on the DP and the non-private model, and the seconds it took.

A second table sweeps the number of canaries for the white-box auditor alone: more canaries
prove more, until the delta term of the bound (2 m delta) takes over. A last row plants a bug
(the engine adds a twentieth of its noise; the accountant still believes the full sigma) to
show the alarm.

    python bench/privacy_audit.py            # m = 1000, 8 shadows per model, ~1-2 min on 2 cores
    python bench/privacy_audit.py --quick    # a smoke run (small table, few canaries)
"""

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import synthetic  # noqa: E402
from app.privacy.accounting import poisson_plan  # noqa: E402
from app.privacy.noise import noise_for_target  # noqa: E402
from worker.dpsgd import DPSGD  # noqa: E402
from worker.privacy_audit import whitebox  # noqa: E402
from worker.privacy_audit.audit import AuditPlan, accounted_epsilon, run  # noqa: E402
from worker.training import TrainingSpec  # noqa: E402

EPSILONS: tuple[float | None, ...] = (1.0, 3.0, 8.0, None)  # None: non-private
DELTA = 1e-5
PROXY_SEED = 987_654  # a public proxy dataset: no registered dataset uses this seed


@dataclass(frozen=True)
class Config:
    rows: int = 8000
    canaries: int = 1000
    shadow_models: int = 8
    sweep: tuple[int, ...] = (100, 300, 1000, 3000, 10_000)
    epochs: int = 500
    repeats: int = 3


QUICK = Config(rows=1000, canaries=100, shadow_models=2, sweep=(50, 200), epochs=50,
               repeats=1)


def _spec(n_train: int, epsilon: float | None, epochs: int) -> TrainingSpec:
    q, per_epoch = poisson_plan(n_train, n_train)
    steps = epochs * per_epoch
    sigma = 0.0 if epsilon is None else noise_for_target(
        target_epsilon=epsilon, delta=DELTA, sample_rate=q, steps=steps)
    return TrainingSpec(
        kind="logistic", hidden_units=16, epochs=epochs, batch_size=n_train, learning_rate=0.5,
        momentum=0.9, max_grad_norm=0.5, noise_multiplier=sigma, sample_rate=q, steps=steps,
        delta=DELTA, seed=0, tail_average=0.5,
    )


@contextlib.contextmanager
def planted_bug(scale: float) -> Iterator[None]:
    """The engine adds ``scale`` times its noise; the accountant is not told."""
    draw = DPSGD.draw_noise

    def weak(self: DPSGD, steps: int) -> list[torch.Tensor | None]:
        return [None if n is None else n.mul_(scale) for n in draw(self, steps)]

    DPSGD.draw_noise = weak  # type: ignore[method-assign]
    try:
        yield
    finally:
        DPSGD.draw_noise = draw  # type: ignore[method-assign]


def _fmt(value: float | None, spec: str = ".3g") -> str:
    return "∞" if value is None or math.isinf(value) else format(value, spec)


def _median_range(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{np.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _values(results: list[dict[str, Any]], path: tuple[str, ...]) -> list[float]:
    """One number per audit result, found by its keys."""
    out = []
    for value in results:
        for key in path:
            value = value[key]
        out.append(float(value))
    return out


def audit_table(config: Config, x: np.ndarray, y: np.ndarray, bug: float) -> None:
    print(f"\n## Audited vs accounted epsilon ({len(x):,} training rows, delta {DELTA:g}, "
          f"m = {config.canaries} canaries, {config.shadow_models} shadows per model, "
          f"{config.repeats} audits per row: median [min, max])\n")
    print("| target ε | σ | accounted ε (PLD) | audited ε, white-box | audited ε, black-box | "
          "σ measured | LiRA AUC DP | LiRA AUC non-private | loss AUC DP | alarms | "
          "s per audit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows: list[tuple[str, float | None, float]] = [(_fmt(e), e, 1.0) for e in EPSILONS]
    rows.append((f"1 (bug: noise x{bug:g})", 1.0, bug))
    for label, epsilon, scale in rows:
        spec = _spec(len(x), epsilon, config.epochs)
        results = []
        for repeat in range(config.repeats):
            plan = AuditPlan(spec=spec, canaries=config.canaries,
                             shadow_models=config.shadow_models, seed=repeat)
            with planted_bug(scale) if scale != 1.0 else contextlib.nullcontext():
                results.append(run(plan, x, y, device=torch.device("cpu")))

        def med(*path: str, found: list[dict[str, Any]] = results) -> float:
            return float(np.median(_values(found, path)))

        white = _median_range(_values(results, ("one_run", "white_box", "epsilon")))
        black = _median_range(_values(results, ("one_run", "black_box", "epsilon")))
        print(f"| {label} | {spec.noise_multiplier:.3g} | "
              f"{_fmt(accounted_epsilon(spec), '.3f')} | {white} | {black} | "
              f"{med('one_run', 'white_box', 'measured_noise_multiplier'):.3g} | "
              f"{med('membership', 'dp', 'lira', 'roc_auc'):.3f} | "
              f"{med('membership', 'non_private', 'lira', 'roc_auc'):.3f} | "
              f"{med('membership', 'dp', 'loss', 'roc_auc'):.3f} | "
              f"{sum(r['alarm'] for r in results)} of {len(results)} | "
              f"{np.mean(_values(results, ('seconds', 'total'))):.1f} |")


def sweep_table(config: Config, x: np.ndarray, y: np.ndarray) -> None:
    print("\n## White-box audited epsilon by number of canaries m\n")
    print("| target ε | accounted ε | " + " | ".join(f"m = {m:,}" for m in config.sweep)
          + " | seconds (all m) |")
    print("|---|---|" + "---|" * (len(config.sweep) + 1))
    for epsilon in EPSILONS:
        spec = _spec(len(x), epsilon, config.epochs)
        started = time.perf_counter()
        found = [
            whitebox.audit(x, y, spec, canaries=m, seed=2, confidence=0.95,
                           device=torch.device("cpu"))["epsilon"]
            for m in config.sweep
        ]
        print(f"| {_fmt(epsilon)} | {_fmt(accounted_epsilon(spec), '.3f')} | "
              + " | ".join(f"{e:.3f}" for e in found)
              + f" | {time.perf_counter() - started:.1f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run at tiny sizes")
    parser.add_argument("--canaries", type=int, help="m of the main table")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the worker's)")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else Config()
    if args.canaries:
        config = replace(config, canaries=args.canaries)
    torch.set_num_threads(args.threads)
    table = synthetic.generate(config.rows, PROXY_SEED)
    train_rows, _ = synthetic.split_indices(config.rows, PROXY_SEED)
    x, y = table.x[train_rows], table.y[train_rows]
    started = time.perf_counter()
    audit_table(config, x, y, bug=0.05)
    sweep_table(config, x, y)
    print(f"\nTotal: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
