"""How much of a cell of ``bench/proxy_study.py`` is the noise's draw.

The study runs each job once per split, so a cell's mean over 5 splits carries one noise draw
per split, for the defaults and for each peer. Where the two run the same algorithm (the
capped regime's mini-batch recipe is the tutorial's: batch 256, 20 epochs, SGD lr 0.5, clip
1, the last iterate), a cell can miss "AUC at least Opacus' - 0.005" by chance alone. This
runs the defaults and Opacus as its tutorial runs it ``--draws`` times on each split (fresh
noise each time, the same parts and plan as the study), and prints per split the mean and sd
of each, the difference over all draws, and how often a study-sized sample (one draw per
split) misses the margin: the defaults against Opacus, and Opacus against itself.

Run: .venv/bin/python bench/peer_draws.py [--table wide@30000] [--epsilon 1] [--draws 6]
[--peer dp_ebm] (DP-EBM with the declared public bounds in Opacus' place)
(about 85 s for the wide table, 6 draws, on 2 cores)
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.patients import identity  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from bench import baselines, peers, proxies  # noqa: E402
from bench import proxy_study as study  # noqa: E402

SPLITS, MARGIN, RESAMPLES = 5, 0.005, 20_000


PEERS = {"opacus": "Opacus' tutorial", "dp_ebm": "DP-EBM"}


def draws(table_spec: str, epsilon: float, n_draws: int,
          peer: str = "opacus") -> tuple[np.ndarray, np.ndarray]:
    """AUC (splits, draws) of the defaults and of ``peer`` (Opacus' tutorial, or DP-EBM with
    the declared public bounds), fresh noise each draw."""
    T, _, E = identity.Part  # noqa: N806
    ours, opacus = np.zeros((SPLITS, n_draws)), np.zeros((SPLITS, n_draws))
    base = proxies.make(table_spec)
    for split in range(SPLITS):
        table = base if base.real else proxies.make(table_spec, generator_seed=split)
        encoder, parts = encoder_for(table.schema), study.split(table, split)
        x_train, x_eval = encoder.encode(parts.x[T]), encoder.encode(parts.x[E])
        request = study.request_for(parts, table, epsilon, split, {}, None)
        delta = job_service.plan(dataset=study.dataset_for(table, parts), request=request).delta
        for k in range(n_draws):
            noise_seed = split + 1000 * k
            scored = study.ours(table, parts, request, noise_seed, study.Cell())
            assert scored is not None, f"the defaults refused {table_spec} at epsilon {epsilon}"
            ours[split, k] = scored.auc
            if peer == "dp_ebm":
                predict = peers.dp_ebm_fit(table.schema, parts.x[T], parts.y[T],
                                           epsilon=epsilon, delta=delta)
                opacus[split, k] = peers.scores(parts.y[E], predict(parts.x[E])).auc
                continue
            coef, bias = peers.opacus_user_fit(x_train, parts.y[T], epsilon=epsilon,
                                               delta=delta, seed=noise_seed)
            opacus[split, k] = peers.scores(parts.y[E],
                                            baselines.sigmoid(x_eval @ coef + bias)).auc
    return ours, opacus


def miss_rate(first: np.ndarray, second: np.ndarray, rng: np.random.Generator) -> float:
    """How often one draw per split of ``first`` averages more than MARGIN below one of
    ``second`` (the study's sample), over RESAMPLES resamples of the draws."""
    rows = np.arange(SPLITS)
    pick = lambda auc: auc[rows, rng.integers(0, auc.shape[1], (RESAMPLES, SPLITS))]  # noqa: E731
    return float(np.mean(pick(first).mean(1) - pick(second).mean(1) < -MARGIN))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", default="wide@30000")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--draws", type=int, default=6)
    parser.add_argument("--peer", choices=sorted(PEERS), default="opacus")
    args = parser.parse_args()
    name = PEERS[args.peer]
    torch.set_num_threads(1)
    started = time.perf_counter()
    ours, opacus = draws(args.table, args.epsilon, args.draws, args.peer)
    print(f"{args.table} at epsilon {args.epsilon:g}: AUC mean (sd) over {args.draws} noise "
          f"draws per split\n\n| split | defaults | {name} |\n|---|---|---|")
    for split in range(SPLITS):
        print(f"| {split} | {ours[split].mean():.4f} ({ours[split].std(ddof=1):.4f}) | "
              f"{opacus[split].mean():.4f} ({opacus[split].std(ddof=1):.4f}) |")
    per_split = ours.mean(1) - opacus.mean(1)
    rng = np.random.default_rng(0)
    print(f"\n- all draws: defaults {ours.mean():.4f}, {name} {opacus.mean():.4f}, difference "
          f"{per_split.mean():+.4f} (standard error over splits "
          f"{per_split.std(ddof=1) / np.sqrt(SPLITS):.4f})")
    print(f"- a study-sized sample misses AUC >= {name} - {MARGIN:g}: the defaults "
          f"{miss_rate(ours, opacus, rng):.0%} of the time, {name} against itself "
          f"{miss_rate(opacus, opacus, rng):.0%}")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
