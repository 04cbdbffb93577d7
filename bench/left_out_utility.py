"""What leaving patients out of a release costs a model: the per-patient filter's utility price.

A release leaves out the patients whose own budget cannot afford it (``app.ledger.left_out``):
their rows are not read, while the plan (sample rate, expected batch, the parts' public sizes)
stays the one charged for the whole table (``app.datasets.parts``, ``worker.dpsgd``). So a
model trained with a share of its patients left out sees fewer rows at the same noise.

On generator tables (``app.datasets.synthetic``, registered as the service registers one), a
default job at each target epsilon is planned, trained, calibrated and evaluated as the worker
does, once reading every row and once with a random share of the patients left out of every
part; the exact ROC-AUC and log-loss of both models on the same full evaluation part (noise-free,
what the release would show without DP) are printed, with their difference. Seeds vary the table
and the training noise; the left-out patients are drawn independently of their values.

    .venv/bin/python bench/left_out_utility.py                 # 20,000 rows, 10% out, 5 seeds
    .venv/bin/python bench/left_out_utility.py --share 0.3 --rows 5000
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import log_loss, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import parts as dataset_parts  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.datasets.patients import identity  # noqa: E402
from app.datasets.service import BUILT_IN_SCHEMA_JSON  # noqa: E402
from app.flows.job_run import LoadedData  # noqa: E402
from bench.fairness_budget import default_job, load  # noqa: E402
from worker import training  # noqa: E402

EPSILONS = (1.0, 3.0, 8.0)
DATA_SEED = 4800


def registration(n_rows: int, seed: int) -> Dataset:
    """The unsaved generator dataset the service would register (private, unshifted), its
    parts keyed by a secret of its own."""
    secret = f"{seed + 1:064x}"
    counts = identity.part_counts(identity.parts_of(range(n_rows), secret,
                                                    scheme=identity.CURRENT_SCHEME))
    return Dataset(id=1, name="left-out-utility", source_kind="synthetic", synthetic_shift=None,
                   n_rows=n_rows, n_train=counts[identity.Part.TRAIN],
                   n_calibration=counts[identity.Part.CALIBRATION], seed=DATA_SEED + seed,
                   record_secret=secret, coin_scheme=identity.CURRENT_SCHEME, public=False,
                   budget_delta=None, schema_json=BUILT_IN_SCHEMA_JSON)


def _without(part: dataset_parts.PartRows, keep: np.ndarray) -> dataset_parts.PartRows:
    """The part's rows a release that left out the others reads; its public size unchanged."""
    return dataset_parts.PartRows(part.x[keep], part.y[keep],
                                  {k: (codes[keep], labels)
                                   for k, (codes, labels) in part.groups.items()}, part.rows)


def _left_out(loaded: LoadedData, share: float, rng: np.random.Generator) -> LoadedData:
    split = loaded.split
    parts = [_without(p, rng.random(len(p.y)) >= share)
             for p in (split.train, split.calibration, split.evaluation)]
    return dataclasses.replace(loaded, split=dataset_parts.Split(*parts))


def _scores(dataset: Dataset, loaded: LoadedData, evaluation: dataset_parts.PartRows,
            epsilon: float, seed: int) -> tuple[float, float]:
    """A default job's exact ROC-AUC and log-loss on ``evaluation`` (every row)."""
    trained = default_job(dataset, loaded, epsilon, seed)
    probability = training.predict_proba(trained.network, evaluation.x, loaded.encoder)
    clipped = np.clip(probability, 1e-7, 1 - 1e-7)
    return float(roc_auc_score(evaluation.y, probability)), float(log_loss(evaluation.y, clipped))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--share", type=float, default=0.1, help="share of patients left out")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(f"generator, {args.rows} rows, {args.share:.0%} of patients left out, "
          f"{args.seeds} seeds; exact figures on the whole evaluation part")
    print(f"{'epsilon':>8} {'AUC all':>8} {'AUC out':>8} {'diff':>7} "
          f"{'logloss all':>12} {'logloss out':>12} {'diff':>7}")
    for epsilon in EPSILONS:
        rows = []
        for seed in range(args.seeds):
            dataset = registration(args.rows, seed)
            loaded = load(dataset)
            evaluation = loaded.split.evaluation
            reduced = _left_out(loaded, args.share, np.random.default_rng(1000 + seed))
            rows.append((*_scores(dataset, loaded, evaluation, epsilon, seed),
                         *_scores(dataset, reduced, evaluation, epsilon, seed)))
        auc, loss, auc_out, loss_out = np.mean(rows, axis=0)
        spread = np.std([r[2] - r[0] for r in rows])
        print(f"{epsilon:>8g} {auc:>8.4f} {auc_out:>8.4f} {auc_out - auc:>+7.4f} "
              f"{loss:>12.4f} {loss_out:>12.4f} {loss_out - loss:>+7.4f}"
              f"   (AUC diff sd {spread:.4f})")


if __name__ == "__main__":
    main()
