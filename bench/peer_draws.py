"""How much of a cell of ``bench/proxy_study.py`` is the noise's draw.

The study runs each job once per split, so a cell's mean over 5 splits carries one noise draw
per split, for the defaults and for each peer. Where the two run the same algorithm (the
capped regime's mini-batch recipe is the tutorial's: batch 256, 20 epochs, SGD lr 0.5, clip
1, the last iterate), a cell can miss "AUC at least Opacus' - 0.005" by chance alone. This
runs the defaults and Opacus as its tutorial runs it ``--draws`` times on each split (fresh
noise each time, the same parts and plan as the study), and prints per split the mean and sd
of each, the difference over all draws, and how often a study-sized sample (one draw per
split) misses the margin: the defaults against Opacus, and Opacus against itself.

``--metric log_loss`` reads the log-loss instead (lower is better, so a miss is the defaults
more than the margin above the peer); ``--peer base_rate`` puts the training part's prevalence
in the peer's place (the same every draw: the study's "never worse than the base rate" goal),
and each split's line then adds the evaluation part's own noise: the standard error, over its
rows, of the paired per-row log-loss difference (a split of some 65 held-out rows decides a
small table's worst cell).

Run: .venv/bin/python bench/peer_draws.py [--table wide@30000] [--epsilon 1] [--draws 6]
[--peer dp_ebm] (DP-EBM with the declared public bounds in Opacus' place)
[--peer dp_ebm_family] (the service's dp_ebm family as its worker runs it, DP calibration
included: is the family ahead of the defaults, or is it the draw?)
[--metric log_loss --peer base_rate --delta max] (the base-rate goal at the largest delta)
(about 85 s for the wide table, 6 draws, on 2 cores)
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.patients import identity  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from bench import baselines, peers, proxies  # noqa: E402
from bench import proxy_study as study  # noqa: E402
from bench.family_choice import family_scores  # noqa: E402

SPLITS, MARGIN, RESAMPLES = 5, 0.005, 20_000


PEERS = {"opacus": "Opacus' tutorial", "dp_ebm": "DP-EBM", "dp_ebm_family": "the dp_ebm family",
         "base_rate": "the base rate"}
METRICS = ("auc", "log_loss")
LAST_PAIRED_SE: dict[int, float] = {}
"""Per split, the last ``draws`` run's paired standard error over the evaluation rows of the
defaults' log-loss less the base rate's (``--peer base_rate`` only)."""


def paired_se(y: np.ndarray, p_ours: np.ndarray, p_peer: np.ndarray) -> float:
    """Standard error over the rows of the mean per-row log-loss difference: how much the
    evaluation part's own draw of rows moves the split's comparison."""
    def row_loss(p: np.ndarray) -> np.ndarray:
        p = np.clip(p, peers.PROBABILITY_FLOOR, 1 - peers.PROBABILITY_FLOOR)
        return -(y * np.log(p) + (1 - y) * np.log1p(-p))
    difference = row_loss(p_ours) - row_loss(p_peer)
    return float(difference.std(ddof=1) / np.sqrt(len(y)))


def _base_rate_split(table: proxies.Proxy, parts: study.Parts, request: Any, n_draws: int,
                     split: int, metric: str) -> tuple[np.ndarray, float, float]:
    """The defaults' ``metric`` per draw, the base rate's, and the paired standard error of the
    last draw's log-loss against the base rate's over the evaluation rows."""
    T, _, E = identity.Part  # noqa: N806
    rate = peers.base_rate(parts.y[T])
    flat = np.full(len(parts.y[E]), rate)
    ours, se = np.zeros(n_draws), 0.0
    for k in range(n_draws):
        kept: dict[str, np.ndarray] = {}
        scored = study.ours(table, parts, request, split + 1000 * k, study.Cell(), kept=kept)
        assert scored is not None, "the defaults refused the table"
        ours[k] = getattr(scored, metric)
        se = paired_se(parts.y[E], kept["probabilities"], flat)
    return ours, float(getattr(peers.scores(parts.y[E], flat), metric)), se


def draws(table_spec: str, epsilon: float, n_draws: int, peer: str = "opacus",
          metric: str = "auc") -> tuple[np.ndarray, np.ndarray]:
    """``metric`` (splits, draws) of the defaults and of ``peer`` (Opacus' tutorial, DP-EBM
    with the declared public bounds, the dp_ebm family, or the training part's base rate),
    fresh noise each draw."""
    T, _, E = identity.Part  # noqa: N806
    ours, opacus = np.zeros((SPLITS, n_draws)), np.zeros((SPLITS, n_draws))
    LAST_PAIRED_SE.clear()
    base = proxies.make(table_spec)
    for split in range(SPLITS):
        table = base if base.real else proxies.make(table_spec, generator_seed=split)
        encoder, parts = encoder_for(table.schema), study.split(table, split)
        x_train, x_eval = encoder.encode(parts.x[T]), encoder.encode(parts.x[E])
        request = study.request_for(parts, table, epsilon, split, {}, None)
        delta = job_service.plan(dataset=study.dataset_for(table, parts), request=request).delta
        if peer == "base_rate":
            ours[split], opacus[split], LAST_PAIRED_SE[split] = _base_rate_split(
                table, parts, request, n_draws, split, metric)
            continue
        for k in range(n_draws):
            noise_seed = split + 1000 * k
            scored = study.ours(table, parts, request, noise_seed, study.Cell())
            assert scored is not None, f"the defaults refused {table_spec} at epsilon {epsilon}"
            ours[split, k] = getattr(scored, metric)
            if peer == "dp_ebm_family":
                opacus[split, k] = getattr(family_scores(table, parts, epsilon, noise_seed),
                                           metric)
                continue
            if peer == "dp_ebm":
                predict = peers.dp_ebm_fit(table.schema, parts.x[T], parts.y[T],
                                           epsilon=epsilon, delta=delta)
                opacus[split, k] = getattr(peers.scores(parts.y[E], predict(parts.x[E])),
                                           metric)
                continue
            coef, bias = peers.opacus_user_fit(x_train, parts.y[T], epsilon=epsilon,
                                               delta=delta, seed=noise_seed)
            opacus[split, k] = getattr(peers.scores(
                parts.y[E], baselines.sigmoid(x_eval @ coef + bias)), metric)
    return ours, opacus


def miss_rate(first: np.ndarray, second: np.ndarray, rng: np.random.Generator,
              lower_is_better: bool = False) -> float:
    """How often one draw per split of ``first`` averages more than MARGIN worse than one of
    ``second`` (the study's sample), over RESAMPLES resamples of the draws: below for AUC,
    above for a loss (``lower_is_better``)."""
    rows = np.arange(SPLITS)
    pick = lambda auc: auc[rows, rng.integers(0, auc.shape[1], (RESAMPLES, SPLITS))]  # noqa: E731
    behind = pick(first).mean(1) - pick(second).mean(1)
    return float(np.mean((-behind if lower_is_better else behind) < -MARGIN))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", default="wide@30000")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--draws", type=int, default=6)
    parser.add_argument("--peer", choices=sorted(PEERS), default="opacus")
    parser.add_argument("--metric", choices=METRICS, default="auc")
    parser.add_argument("--delta", choices=["default", "max"], default="default",
                        help="as bench/proxy_study.py's: max is delta 1/(10 n_rows)")
    args = parser.parse_args()
    study.BUDGET_DELTA["rule"] = args.delta
    name, label, loss = PEERS[args.peer], args.metric.replace("_", "-"), args.metric != "auc"
    torch.set_num_threads(1)
    started = time.perf_counter()
    ours, opacus = draws(args.table, args.epsilon, args.draws, args.peer, args.metric)
    paired = " rows' paired SE |" if LAST_PAIRED_SE else ""
    print(f"{args.table} at epsilon {args.epsilon:g} (delta: {args.delta}): {label} mean (sd) "
          f"over {args.draws} noise draws per split\n\n| split | defaults | {name} |{paired}"
          f"\n|---|---|---|{'---|' if paired else ''}")
    for split in range(SPLITS):
        extra = f" {LAST_PAIRED_SE[split]:.4f} |" if split in LAST_PAIRED_SE else ""
        print(f"| {split} | {ours[split].mean():.4f} ({ours[split].std(ddof=1):.4f}) | "
              f"{opacus[split].mean():.4f} ({opacus[split].std(ddof=1):.4f}) |{extra}")
    per_split = ours.mean(1) - opacus.mean(1)
    rng = np.random.default_rng(0)
    print(f"\n- all draws: defaults {ours.mean():.4f}, {name} {opacus.mean():.4f}, difference "
          f"{per_split.mean():+.4f} (standard error over splits "
          f"{per_split.std(ddof=1) / np.sqrt(SPLITS):.4f})")
    goal = f"<= {name} + {MARGIN:g}" if loss else f">= {name} - {MARGIN:g}"
    print(f"- a study-sized sample misses {label} {goal}: the defaults "
          f"{miss_rate(ours, opacus, rng, loss):.0%} of the time, {name} against itself "
          f"{miss_rate(opacus, opacus, rng, loss):.0%}")
    print(f"\n{time.perf_counter() - started:.0f} s")

if __name__ == "__main__":
    main()
