"""Privacy-utility benchmark: the service's default recipe against hand-tuned Opacus settings.

Both run through ``worker.training.train`` and ``worker.calibration`` (the code path jobs take)
on public proxy datasets
(generator seeds no real dataset uses), 8,000 rows each (5,600 train), delta 1e-5, at epsilon 1,
3, 8 and non-private. Scoring is on fresh generator rows; the Bayes-optimal AUC of the *same*
rows (the true probabilities) is printed beside every figure, because it moves by +-0.004 from
one 200k-row draw to the next and no model can beat it.

    python bench/utility.py            # 3 datasets x 5 seeds, 1M evaluation rows, writes the plot
    python bench/utility.py --quick    # 1 dataset x 2 seeds, 50k rows (a smoke run)

Baseline ("Opacus hand-tuned", the goals' reference): batch 512, 20 epochs, SGD momentum 0.9,
lr 0.5, clip 1, last iterate. Default: the service's (``TrainingConfig``): full batch (q = 1),
1000 steps, Adam at lr 0.3 (epsilon 5 noise stds), the clip of app/jobs/recipe.py, average of
the last half of the iterates; sessions scaled over their model range. The service's
capped-regime rule (``app.jobs.recipe.capped_regime``) is followed too; it does not apply
to these tables (their calibration part carries the fine calibration at epsilon 1).
"""

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import synthetic  # noqa: E402
from app.datasets.schema.encoding import BUILT_IN_ENCODER  # noqa: E402
from app.jobs import recipe as rules  # noqa: E402
from app.jobs.recipe import default_clip, default_learning_rate  # noqa: E402
from app.jobs.schemas import FULL_BATCH_EPOCHS, TrainingConfig  # noqa: E402
from app.privacy.accounting import (  # noqa: E402
    Mechanism,
    PRVAccountant,
    poisson_plan,
)
from app.privacy.noise import epochs_for_target, noise_for_target  # noqa: E402
from app.reports.svg_plot import Chart, Reference, Series, render_svg  # noqa: E402
from worker.calibration import calibrate_model  # noqa: E402
from worker.training import TrainingSpec, predict_proba, train  # noqa: E402

DELTA = 1e-5
N_ROWS = 8_000
EPSILONS = (1.0, 3.0, 8.0, None)  # None: non-private
GOALS = {1.0: 0.830, 3.0: 0.836, 8.0: 0.838}
SEED_FLOOR = 0.82
# The goals were stated on evaluation rows whose Bayes-optimal AUC was 0.845; a 1M-row draw
# here gives 0.840 (the ceiling itself moves by +-0.004 between 200k-row draws). The same goals
# as distances below the Bayes ceiling of the rows measured on are printed beside them.
ISSUE_BAYES = 0.845
PROXY_SEEDS = (910_001, 910_002, 910_003, 910_004, 910_005)  # not the seeds defaults were tuned on
EVAL_SEED = 4242


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    batch_size: int | None  # None: full batch
    epochs: int
    learning_rate: float
    momentum: float
    max_grad_norm: float | None  # None: the service's public rule (app/jobs/recipe.py)
    tail_average: float
    optimizer: str = "sgd"
    capped_rule: bool = False  # the service's capped-regime rule (app.jobs.recipe.capped_regime)


def ece_equal_mass(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> float:
    """Expected calibration error over equal-mass bins of the sorted probabilities.

    Exact, so only for the public proxy rows here: the service's evaluation is a DP release
    (worker.evaluation) and has no such figure.
    """
    order = np.argsort(p, kind="stable")
    gaps = [abs(p[rows].sum() - y[rows].sum()) for rows in np.array_split(order, n_bins)]
    return float(sum(gaps) / len(y))


def default_recipe() -> Recipe:
    d = TrainingConfig()
    learning_rate = d.learning_rate or default_learning_rate(d.optimizer, d.model)
    return Recipe("service default", d.batch_size, FULL_BATCH_EPOCHS, learning_rate,
                  d.momentum, d.max_grad_norm, d.tail_average, d.optimizer, capped_rule=True)


BASELINE = Recipe("Opacus hand-tuned", 512, 20, 0.5, 0.9, 1.0, 0.0)


def capped(recipe: Recipe, n_train: int, n_calibration: int, epsilon: float | None) -> Recipe:
    """The recipe the service plans: the capped regime's where its rule applies
    (``app.jobs.recipe.capped_regime``; not on these 8,000-row, 6-input tables, whose
    calibration part carries the fine release at epsilon 1)."""
    if not recipe.capped_rule or not rules.capped_regime_applies(
            target_epsilon=epsilon, delta=DELTA, n_calibration=n_calibration,
            inputs=BUILT_IN_ENCODER.n_inputs):
        return recipe
    return dataclasses.replace(
        recipe, batch_size=rules.capped_batch_size(n_train), epochs=rules.CAPPED_EPOCHS,
        learning_rate=rules.CAPPED_LEARNING_RATE, momentum=rules.CAPPED_MOMENTUM,
        max_grad_norm=rules.CAPPED_CLIP, tail_average=rules.CAPPED_TAIL_AVERAGE,
        optimizer=rules.CAPPED_OPTIMIZER)


def spec_for(recipe: Recipe, n_train: int, epsilon: float | None, seed: int) -> TrainingSpec:
    recipe = capped(recipe, n_train, N_ROWS - n_train, epsilon)
    batch = recipe.batch_size or n_train
    sample_rate, steps_per_epoch = poisson_plan(n_train, batch)
    epochs = recipe.epochs
    if epsilon is not None and recipe.batch_size is None:  # as the service plans a default
        epochs = epochs_for_target(target_epsilon=epsilon, delta=DELTA, sample_rate=sample_rate,
                                   steps_per_epoch=steps_per_epoch, max_epochs=epochs) or epochs
    steps = epochs * steps_per_epoch
    sigma = 0.0 if epsilon is None else noise_for_target(
        target_epsilon=epsilon, delta=DELTA, sample_rate=sample_rate, steps=steps
    )
    clip = recipe.max_grad_norm or default_clip(
        noise_multiplier=sigma, sample_rate=sample_rate, steps=steps, n_train=n_train,
        inputs=BUILT_IN_ENCODER.n_inputs)
    return TrainingSpec(
        kind="logistic", hidden_units=16, epochs=epochs, batch_size=batch,
        learning_rate=recipe.learning_rate, momentum=recipe.momentum,
        max_grad_norm=clip, noise_multiplier=sigma, sample_rate=sample_rate,
        steps=steps, delta=DELTA, seed=seed, tail_average=recipe.tail_average,
        optimizer=recipe.optimizer,
    )


def run(recipe: Recipe, datasets: list[int], seeds: int, x_eval: np.ndarray,
        y_eval: np.ndarray) -> dict[float | None, dict[str, float]]:
    """AUC (calibration cannot change it), and ECE on fresh rows before and after the worker's
    DP calibration on each dataset's held-out rows."""
    results: dict[float | None, dict[str, float]] = {}
    for epsilon in EPSILONS:
        aucs, spent, ece_raw, ece_cal, mean_p = [], [], [], [], []
        started = time.perf_counter()
        for dataset_seed in datasets:
            table = synthetic.generate(N_ROWS, dataset_seed)
            train_rows, held_out = synthetic.split_indices(N_ROWS, dataset_seed)
            x, y = table.x[train_rows], table.y[train_rows]
            for seed in range(seeds):
                spec = spec_for(recipe, len(y), epsilon, seed)
                result = train(x, y, spec, device=torch.device("cpu"))
                raw = predict_proba(result.network, x_eval)
                aucs.append(roc_auc_score(y_eval, raw))
                history = [Mechanism(*step) for step in result.history]
                eps = PRVAccountant().epsilon(history, DELTA) if history else math.inf
                if history:
                    spent.append(eps)
                calibrate_model(result.network, table.x[held_out], table.y[held_out],
                                history=history, delta=DELTA, training_epsilon=eps)
                calibrated = predict_proba(result.network, x_eval)
                ece_raw.append(ece_equal_mass(y_eval, raw))
                ece_cal.append(ece_equal_mass(y_eval, calibrated))
                mean_p.append(float(calibrated.mean()))
        results[epsilon] = {
            "mean": float(np.mean(aucs)), "min": float(np.min(aucs)),
            "epsilon": max(spent) if spent else math.inf,
            "seconds_per_run": (time.perf_counter() - started) / len(aucs),
            "ece_raw": float(np.mean(ece_raw)), "ece_calibrated": float(np.mean(ece_cal)),
            "ece_calibrated_max": float(np.max(ece_cal)), "mean_p": float(np.mean(mean_p)),
        }
    return results


def epsilon_one_spread(datasets: list[int], runs: int, x_eval: np.ndarray, y_eval: np.ndarray,
                       bayes: float) -> None:
    """How often one default epsilon = 1 job lands below the seed floor.

    At epsilon 1 the noise, not the data, sets the spread: a handful of runs cannot show the
    lower tail, so this trains ``runs`` models (fresh noise each) and prints its quantiles.
    """
    recipe, aucs = default_recipe(), []
    for k in range(runs):
        dataset_seed = datasets[k % len(datasets)]
        table = synthetic.generate(N_ROWS, dataset_seed)
        train_rows, _ = synthetic.split_indices(N_ROWS, dataset_seed)
        spec = spec_for(recipe, len(train_rows), 1.0, k)
        result = train(table.x[train_rows], table.y[train_rows], spec, device=torch.device("cpu"))
        aucs.append(roc_auc_score(y_eval, predict_proba(result.network, x_eval)))
    a = np.array(aucs)
    floor_gap = SEED_FLOOR + bayes - ISSUE_BAYES
    q01, q05, q10, q50 = np.quantile(a, [0.01, 0.05, 0.10, 0.50])
    print(f"\nepsilon = 1, service default, {runs} runs over {len(datasets)} datasets: mean "
          f"{a.mean():.4f}, sd {a.std():.4f}, quantiles 1% {q01:.4f} 5% {q05:.4f} 10% {q10:.4f} "
          f"50% {q50:.4f}, min {a.min():.4f}; below {SEED_FLOOR}: {(a < SEED_FLOOR).mean():.1%}, "
          f"below {floor_gap:.4f} (the floor as a gap to Bayes): {(a < floor_gap).mean():.1%}")


def write_plot(path: Path, rows: dict[str, dict], bayes: float) -> None:
    series = []
    for index, (name, results) in enumerate(rows.items()):
        points = [(eps, r["mean"]) for eps, r in results.items() if eps is not None]
        series.append(Series(name, points, color=("#0072B2", "#D55E00")[index % 2]))
    refs = [Reference("Bayes-optimal (same rows)", bayes, dash="2 3")]
    refs += [Reference(f"non-private, {name}", r[None]["mean"], color=("#0072B2", "#D55E00")[i])
             for i, (name, r) in enumerate(rows.items())]
    chart = Chart(
        chart_id="utility", title="Privacy-utility: epsilon vs ROC-AUC", x_label="epsilon",
        y_label="ROC-AUC", series=series, references=refs, y_from_zero=False,
        description="Mean ROC-AUC over datasets and seeds at epsilon 1, 3 and 8.",
    )
    path.write_text(render_svg(chart), encoding="utf-8")


def _verdicts(goal: float | None, result: dict[str, float], bayes: float) -> str:
    """PASS/FAIL against the absolute goal, then against the goal as a gap to Bayes."""
    if goal is None:
        return " | "
    absolute = result["mean"] >= goal and result["min"] >= SEED_FLOOR
    shift = bayes - ISSUE_BAYES
    relative = result["mean"] >= goal + shift and result["min"] >= SEED_FLOOR + shift
    return (f">= {goal}, min >= {SEED_FLOOR}: {'PASS' if absolute else 'FAIL'} | "
            f">= {goal + shift:.4f}, min >= {SEED_FLOOR + shift:.4f}: "
            f"{'PASS' if relative else 'FAIL'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 dataset, 2 seeds, 50k rows")
    parser.add_argument("--datasets", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--eval-rows", type=int, default=1_000_000)
    parser.add_argument("--plot", type=Path, default=Path("bench/utility.svg"))
    parser.add_argument("--spread-runs", type=int, default=120,
                        help="epsilon = 1 runs for the lower-tail study (0: skip)")
    args = parser.parse_args()
    if args.quick:
        args.datasets, args.seeds, args.eval_rows, args.spread_runs = 1, 2, 50_000, 10
    torch.set_num_threads(1)
    evaluation = synthetic.generate(args.eval_rows, EVAL_SEED)
    bayes = roc_auc_score(evaluation.y, evaluation.p)
    datasets = list(PROXY_SEEDS[: args.datasets])
    print(f"# {len(datasets)} proxy datasets x {args.seeds} seeds, {N_ROWS} rows each; "
          f"AUC on {args.eval_rows} fresh rows whose Bayes-optimal AUC is {bayes:.4f}")
    rows = {r.name: run(r, datasets, args.seeds, evaluation.x, evaluation.y)
            for r in (BASELINE, default_recipe())}
    base, ours = rows[BASELINE.name], rows[default_recipe().name]
    print("\n| epsilon | Opacus hand-tuned | service default (min seed) | gain | gap to Bayes "
          "| goal (absolute) | goal (as gap to Bayes) | s/run |")
    print("|---|---:|---:|---:|---:|---|---|---:|")
    for eps in EPSILONS:
        b, o = base[eps], ours[eps]
        label = "non-private" if eps is None else f"{eps:g} (PRV {o['epsilon']:.3f})"
        print(f"| {label} | {b['mean']:.4f} | {o['mean']:.4f} ({o['min']:.4f}) | "
              f"{o['mean'] - b['mean']:+.4f} | {o['mean'] - bayes:+.4f} | "
              f"{_verdicts(GOALS.get(eps), o, bayes)} | {o['seconds_per_run']:.2f} |")
    print(f"\nCalibration on the fresh rows (prevalence {evaluation.y.mean():.4f}): expected "
          "calibration error (10 equal-mass bins) of the trained model, then after the DP "
          "calibration on each dataset's held-out rows (no extra privacy spend)")
    print("\n| epsilon | recipe | ECE raw | ECE calibrated (worst run) | mean probability |")
    print("|---|---|---:|---:|---:|")
    for eps in EPSILONS:
        for name, results in rows.items():
            r = results[eps]
            label = "non-private" if eps is None else f"{eps:g}"
            print(f"| {label} | {name} | {r['ece_raw']:.4f} | {r['ece_calibrated']:.4f} "
                  f"({r['ece_calibrated_max']:.4f}) | {r['mean_p']:.4f} |")
    if args.spread_runs:
        epsilon_one_spread(datasets, args.spread_runs, evaluation.x, evaluation.y, bayes)
    write_plot(args.plot, rows, bayes)
    print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
