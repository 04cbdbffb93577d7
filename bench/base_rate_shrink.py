"""Shrinking the released probabilities toward a base rate: can a public weight keep every split
at or below the base rate's log-loss without costing the tables that are calibrated today?

The map is logit' = (1 - w) logit + w logit(b): for w < 1 it is increasing, so every AUC is
unchanged, and it is affine in log-odds, so it would fold into the model's last layer as the
calibration does. Each cell's default job (``bench/proxy_study.py``'s path: plan, train, DP
calibration at the held-out noise) is trained once per split and draw; the rules are then
scored on the evaluation part's exact log-loss (public tables), beside the training part's base
rate (the study's ``LL split`` goal).

Where ``b`` comes from (``SOURCES``):

* ``exact``: the training part's prevalence, no noise. Not a release: the ceiling of any shrink
  toward a base rate, whatever its noise.
* ``released``: the calibration release's noisy positives summed over its bins, over the part's
  public size (post-processing, no new spend); where the release was withheld (below its size
  floor), one Gaussian count of the part's positives at the same held-out noise in its place
  (the same parallel composition covers it). Kept within half a row of 0 and 1.

``w`` is either a public constant (the same for every cell: the rule could read only public
quantities, and none of them tells a table whose model ranks well from one whose model is the
noise's) or ``selected``: the weight on a grid whose map the calibration release's own
likelihood (``worker.platt_fit``'s, the noise deconvolved) rates highest, post-processing of
that release where there is one.

    .venv/bin/python bench/base_rate_shrink.py --tables mixed@430,strong@430,mixed@600,crisis@1000
    .venv/bin/python bench/base_rate_shrink.py --tables breast_cancer,anes96 --draws 1
"""

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.patients import identity  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import baselines, peers, proxies  # noqa: E402
from bench import proxy_study as study  # noqa: E402
from worker import calibration as cal  # noqa: E402
from worker import platt_fit, training  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
SOURCES = ("exact", "released")
GRID = np.linspace(0.0, 1.0, 11)


@dataclass(frozen=True)
class Job:
    """One trained and calibrated default job: what the rules read."""

    table: str
    split: int
    epsilon: float
    logits: np.ndarray  # the calibrated model's log-odds on the evaluation part
    y: np.ndarray  # the evaluation part's outcomes
    base_train: float  # the training part's prevalence (the goal's base rate)
    non_private: float  # non-private logistic regression's log-loss on the evaluation part
    calibration: cal.Calibration
    cal_positives: float  # the calibration part's exact positives (for the withheld count)
    cal_rows: int
    noise: float  # the held-out noise multiplier


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def shrink(z: np.ndarray, w: float, b: float) -> np.ndarray:
    """logit' = (1 - w) logit + w logit(b): increasing for w < 1 (the AUC unchanged)."""
    return (1.0 - w) * z + w * logit(b)


def released_base_rate(job: Job, rng: np.random.Generator) -> float:
    """``released`` (see the module): the calibration release's positives, or one count at the
    held-out noise where it was withheld."""
    positives = job.calibration.noisy_positives
    total = (float(np.sum(positives)) if positives
             else job.cal_positives + float(rng.normal(0.0, job.noise)))
    return float(np.clip(total / job.cal_rows, 0.5 / job.cal_rows, 1 - 0.5 / job.cal_rows))


def release_log_likelihood(release: cal.Calibration, slope: float, intercept: float) -> float:
    """The calibration release's deconvolved log-likelihood of the map slope * logit +
    intercept (``worker.platt_fit``), post-processing of the release."""
    counts, positives = np.array(release.noisy_counts), np.array(release.noisy_positives)
    edges = np.array(release.bin_edges_logit)
    nodes, weights = cal.bin_points(edges, counts)
    sig = sigmoid(slope * nodes + intercept)
    p = np.clip(np.sum(weights * sig, axis=1), 1e-300, None)
    q = np.clip(np.sum(weights * (1.0 - sig), axis=1), 1e-300, None)
    rows, pos, weight = platt_fit._grids(counts, positives,
                                         release.noise_multiplier * cal.SENSITIVITY)
    terms = weight + pos * np.log(p)[:, None] + (rows - pos) * np.log(q)[:, None]
    return float(np.sum(logsumexp(terms, axis=1)))


def selected_weight(job: Job, b: float) -> float:
    """The grid weight whose map (composed with the fitted Platt map) the release rates
    highest; 0 where nothing was released."""
    release = job.calibration
    if not release.noisy_counts:
        return 0.0
    s, c = release.slope, release.intercept
    return float(max(GRID, key=lambda w: release_log_likelihood(
        release, (1 - w) * s, (1 - w) * c + w * logit(b))))


def _epsilon_of(history: list[tuple[float, float, int]]) -> Callable[[float], float]:
    """The training's accounted epsilon at a given delta."""
    return lambda delta: training.epsilon_of(history, delta)[0]


def collect(spec: str, splits: int, epsilons: tuple[float, ...], draws: int) -> list[Job]:
    """Every (split, epsilon, draw) job of one table, trained as the study trains it."""
    T, C, E = identity.Part  # noqa: N806
    jobs, proxy = [], proxies.make(spec)
    for s in range(splits):
        table = proxy if proxy.real else proxies.make(spec, generator_seed=s)
        encoder, parts = encoder_for(table.schema), study.split(table, s)
        x_train, x_eval = encoder.encode(parts.x[T]), encoder.encode(parts.x[E])
        coef, bias = baselines.non_private_fit(x_train, parts.y[T])
        non_private = peers.scores(parts.y[E], baselines.sigmoid(x_eval @ coef + bias)).log_loss
        for eps in epsilons:
            request = study.request_for(parts, table, eps, s, {}, None)
            plan = spec_of(job_service.plan(dataset=study.dataset_for(table, parts),
                                            request=request))
            for k in range(draws):
                seed = s + 1000 * k
                with study.seeded_noise(seed):
                    result = training.train(parts.x[T], parts.y[T], plan,
                                            device=torch.device("cpu"), encoder=encoder)
                history = [Mechanism(*step) for step in result.history]
                epsilon_at = _epsilon_of(result.history)
                noise = held_out_noise(history, [plan.delta], epsilon_at)
                released = cal.calibrate_if_meaningful(
                    result.network, parts.x[C], parts.y[C], history=history, delta=plan.delta,
                    training_epsilon=epsilon_at(plan.delta),
                    noise_multiplier=noise, encoder=encoder, rng=np.random.default_rng(seed))
                jobs.append(Job(
                    spec, s, eps, training.predict_log_odds(result.network, parts.x[E], encoder),
                    parts.y[E], peers.base_rate(parts.y[T]), non_private, released,
                    float(parts.y[C].sum()), len(parts.y[C]), noise))
    return jobs


Rule = Callable[[Job, np.random.Generator], np.ndarray]


def rule_for(source: str, weight: float | None) -> Rule:
    """The probabilities of a rule: a shrink toward ``source``'s base rate by ``weight`` (None:
    the weight the release selects)."""
    def probabilities(job: Job, rng: np.random.Generator) -> np.ndarray:
        b = job.base_train if source == "exact" else released_base_rate(job, rng)
        w = selected_weight(job, b) if weight is None else weight
        return sigmoid(shrink(job.logits, w, b))
    return probabilities


@dataclass(frozen=True)
class Summary:
    """One cell under one rule: mean and worst split (each split's draws averaged), splits above
    their base rate and the largest excess."""

    mean: float
    worst: float
    above: int
    excess: float


def summarise(jobs: list[Job], rule: Rule) -> dict[tuple[str, float], Summary]:
    rng = np.random.default_rng(0)
    losses: dict[tuple[str, float], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    bases: dict[tuple[str, float, int], float] = {}
    for job in jobs:
        losses[job.table, job.epsilon][job.split].append(peers.scores(job.y, rule(job, rng))
                                                         .log_loss)
        bases[job.table, job.epsilon, job.split] = peers.scores(
            job.y, np.full(len(job.y), job.base_train)).log_loss
    out = {}
    for (table, eps), per_split in losses.items():
        mean = {s: float(np.mean(v)) for s, v in per_split.items()}
        excess = {s: mean[s] - bases[table, eps, s] for s in mean}
        out[table, eps] = Summary(float(np.mean(list(mean.values()))), max(mean.values()),
                                  sum(e > 1e-9 for e in excess.values()), max(excess.values()))
    return out


def base_summary(jobs: list[Job]) -> dict[tuple[str, float], tuple[float, float, int]]:
    """Per cell, the base rate's mean (worst) log-loss and the splits where non-private logistic
    regression is above it (where the per-split goal is above the ceiling)."""
    per: dict[tuple[str, float], dict[int, tuple[float, float]]] = defaultdict(dict)
    for job in jobs:
        base = peers.scores(job.y, np.full(len(job.y), job.base_train)).log_loss
        per[job.table, job.epsilon][job.split] = (base, job.non_private)
    return {key: (float(np.mean([b for b, _ in v.values()])), max(b for b, _ in v.values()),
                  sum(n > b for b, n in v.values())) for key, v in per.items()}


def _text(s: Summary) -> str:
    return f"{s.mean:.3f} ({s.worst:.3f}) {s.above}"


def print_report(jobs: list[Job], weights: tuple[float, ...]) -> None:
    today = summarise(jobs, rule_for("exact", 0.0))
    bases = base_summary(jobs)
    for source in SOURCES:
        rules = {f"w {w:g}": rule_for(source, w) for w in weights if w > 0}
        rules["selected"] = rule_for(source, None)
        results = {name: summarise(jobs, rule) for name, rule in rules.items()}
        print(f"\n### b {source}: log-loss mean (worst split) and splits above their base rate\n")
        print("| table | ε | base rate | non-private above | today | " + " | ".join(results)
              + " |")
        print("|---|---|---|---|---|" + "---|" * len(results))
        for key in sorted(today):
            base_mean, base_worst, np_above = bases[key]
            print(f"| {key[0]} | {key[1]:g} | {base_mean:.3f} ({base_worst:.3f}) | {np_above} "
                  f"| {_text(today[key])} | "
                  + " | ".join(_text(r[key]) for r in results.values()) + " |")
        print("\n| rule | cells whose mean is above | splits above | largest excess | "
              "worst split's change, most |")
        print("|---|---|---|---|---|")
        splits = len({(j.table, j.epsilon, j.split) for j in jobs})
        for name, result in {"today": today, **results}.items():
            change = max(result[k].worst - today[k].worst for k in result)
            print(f"| {name} | {sum(r.mean > bases[k][0] for k, r in result.items())} "
                  f"| {sum(r.above for r in result.values())} of {splits}"
                  f" | {max(r.excess for r in result.values()):+.3f} | {change:+.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", default="mixed@430,strong@430,mixed@600,crisis@1000")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--epsilons", default="0.5,1,3,8")
    parser.add_argument("--draws", type=int, default=2)
    parser.add_argument("--weights", default=",".join(f"{w:g}" for w in WEIGHTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    jobs = [job for spec in args.tables.split(",")
            for job in collect(spec, args.splits, epsilons, args.draws)]
    print(f"{args.tables}: {args.splits} splits x {args.draws} draws, default delta")
    print_report(jobs, tuple(float(w) for w in args.weights.split(",")))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
