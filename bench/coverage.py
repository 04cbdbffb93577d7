"""Bias and interval coverage of the service's DP estimators over simulated releases.

Each condition draws fresh held-out rows (or two cohorts) from a known population, releases them
with the exact mechanism the worker uses and reads them with the service's own estimators:
``worker.evaluation.evaluate`` (the evaluation's one Gaussian release and every metric read off
it; the worker's release also holds two groupings' histograms, so its L2 sensitivity is sqrt(3):
here the overall histogram alone gets that noise, the same noise on the figures scored, at a
third of the cost) and
``worker.monitoring.drift.feature_drift`` (two noisy feature histograms, 10 public bins). The
noise multiplier is that of one Gaussian release at the condition's epsilon (delta 1e-5).

Truth: for the evaluation, the metric of the population's binned counts (the model's figure on
every patient it will meet: the interval must cover the held-out rows' sampling and the noise);
for drift, the distance between the two cohorts' exact histograms. Per estimator and condition:
the share of releases that show the figure (the rest are withheld with a reason), the mean
error of those shown (bias), and the share of shown intervals holding the truth (coverage).
Goals: |bias| <= 0.02 for ROC-AUC, coverage >= 0.90 for every 95% interval.

    nice -n 10 .venv/bin/python bench/coverage.py            # 200 releases per condition
    .venv/bin/python bench/coverage.py --releases 40         # a quick look
    .venv/bin/python bench/coverage.py --condition "500 rows"  # conditions holding the text
    .venv/bin/python bench/coverage.py --only evaluation --bootstrap 0 --releases 5000
                                                             # bias over many releases, no intervals
"""

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.privacy.accounting import Mechanism, gaussian_epsilon  # noqa: E402
from worker.dp_histogram import bin_edges, bin_of, histogram  # noqa: E402
from worker.evaluation import N_BOOTSTRAP, evaluate  # noqa: E402
from worker.histogram_metrics import summary  # noqa: E402
from worker.monitoring.distances import DISTANCES  # noqa: E402
from worker.monitoring.drift import NoisyHistogram, feature_drift  # noqa: E402

DELTA = 1e-5
GROUPINGS = 2
EVALUATION = [  # (prevalence, held-out rows, epsilon)
    (0.05, 2_000, 1.0), (0.05, 50_000, 0.5), (0.22, 500, 1.0), (0.22, 1_100, 1.0),
    (0.22, 50_000, 8.0), (0.5, 5_000, 0.5), (0.7, 500, 1.0), (0.7, 5_000, 3.0),
]
METRICS = {  # label -> (key of the evaluation's answer, key of ``summary``)
    "ROC-AUC": (("roc_auc",), "roc_auc"),
    "PR-AUC": (("pr_auc",), "pr_auc"),
    "Brier": (("brier",), "brier"),
    "prevalence": (("prevalence",), "prevalence"),
    "high band precision": (("bands", "high", "at_or_above", "precision"),
                            "bands.high.at_or_above.precision"),
    "high band recall": (("bands", "high", "at_or_above", "recall"),
                         "bands.high.at_or_above.recall"),
    "medium band share": (("bands", "medium", "exactly", "share_of_rows"),
                          "bands.medium.exactly.share_of_rows"),
}
DRIFT = [  # (cohort rows, epsilon, features in the release, shift of the follow-up in sds)
    (5_000, 1.0, 10, 0.0), (5_000, 1.0, 10, 0.1), (1_000, 1.0, 20, 0.0), (1_000, 1.0, 20, 0.3),
    (20_000, 0.5, 30, 0.05), (500, 8.0, 2, 0.2), (2_000, 1.0, 20, 0.0),
]
DRIFT_EDGES = np.linspace(-3.0, 3.0, 11)


def noise_multiplier(epsilon: float) -> float:
    """The smallest noise multiplier of one Gaussian release within ``epsilon`` at ``DELTA``."""
    low, high = 0.01, 500.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if gaussian_epsilon([Mechanism(mid, 1.0, 1)], DELTA) > epsilon \
            else (low, mid)
    return high


def population(prevalence: float, rng: np.random.Generator,
               size: int = 1_000_000) -> tuple[np.ndarray, np.ndarray]:
    """A calibrated model's probabilities (log-odds spread 1.6: ROC-AUC about 0.84) and
    outcomes drawn from them, at the given prevalence."""
    u, target = rng.standard_normal(size), math.log(prevalence / (1 - prevalence))
    shift = target
    for _ in range(30):
        mean = float(np.mean(1 / (1 + np.exp(-(shift + 1.6 * u)))))
        shift += target - math.log(mean / (1 - mean))
    p = 1 / (1 + np.exp(-(shift + 1.6 * u)))
    return p, (rng.random(size) < p).astype(np.int64)


def thresholds_for(prevalence: float) -> dict[str, float]:
    """Bands a clinic would declare from the base rate: medium from it, high at 2.5 times it
    (or halfway to 1 from it)."""
    high = 2.5 * prevalence if prevalence < 0.3 else prevalence + (1 - prevalence) / 2
    return {"low_medium": prevalence, "medium_high": high}


def _get(answer: dict, path: tuple[str, ...]) -> tuple[float | None, list | None]:
    *parents, key = path
    for name in parents:
        answer = answer[name]
    return answer[key], answer[f"{key}_ci"]


Row = tuple[str, str, float, float, float, float]  # estimator, condition, shown, bias, cover, truth


def _tally(label: str, condition: str, truth: float,
           found: list[tuple[float | None, list | None]]) -> Row:
    shown = [(v, ci) for v, ci in found if v is not None]
    with_ci = [ci for _, ci in shown if ci is not None]
    bias = float(np.mean([v for v, _ in shown]) - truth) if shown else math.nan
    cover = float(np.mean([lo <= truth <= hi for lo, hi in with_ci])) if with_ci else math.nan
    return label, condition, len(shown) / len(found), bias, cover, truth


def evaluation_rows(releases: int, rng: np.random.Generator, only: str = "",
                    n_bootstrap: int = N_BOOTSTRAP) -> list[Row]:
    out = []
    for prevalence, n, epsilon in EVALUATION:
        condition = f"prevalence {prevalence:.0%}, {n} rows, epsilon {epsilon:g}"
        if only not in condition:
            continue
        p, y = population(prevalence, rng)
        thresholds = thresholds_for(prevalence)
        edges = bin_edges(thresholds)
        truth = summary(histogram(bin_of(p, edges), y, len(edges) + 1)[0], edges, thresholds)
        noise = noise_multiplier(epsilon) * math.sqrt(1 + GROUPINGS)
        found: dict[str, list] = {label: [] for label in METRICS}
        for _ in range(releases):
            pick = rng.integers(0, len(p), n)
            answer = evaluate(y[pick], p[pick], groups={}, noise_multiplier=noise,
                              band_thresholds=thresholds, rng=rng, public_rows=n,
                              n_bootstrap=n_bootstrap)
            for label, (path, _) in METRICS.items():
                found[label].append(_get(answer, path))
        out += [_tally(label, condition, float(truth[key]), found[label])
                for label, (_, key) in METRICS.items()]
    return out


def drift_rows(releases: int, rng: np.random.Generator, only: str = "") -> list[Row]:
    out = []
    centres = (DRIFT_EDGES[:-1] + DRIFT_EDGES[1:]) / 2
    inner = DRIFT_EDGES[1:-1]
    for n, epsilon, features, shift in DRIFT:
        condition = f"{n} rows a side, epsilon {epsilon:g}, {features} features, shift {shift:g} sd"
        if only not in condition:
            continue
        std = noise_multiplier(epsilon) * math.sqrt(features)
        found: dict[str, list] = {name: [] for name in DISTANCES}
        truths: dict[str, list] = {name: [] for name in DISTANCES}
        for _ in range(releases):
            ref, fup = (np.bincount(np.searchsorted(inner, rng.standard_normal(n) + s),
                                    minlength=len(centres)).astype(float) for s in (0.0, shift))
            answer = feature_drift(NoisyHistogram(ref + rng.normal(0, std, ref.shape), std),
                                   NoisyHistogram(fup + rng.normal(0, std, fup.shape), std),
                                   centres=centres, rng=rng)
            for name, d in DISTANCES.items():
                found[name].append((answer[name], answer[f"{name}_ci"]))
                truths[name].append(float(d.of(ref, fup, centres)))
        for name in DISTANCES:  # the truth differs per release: score each against its own
            errors = [(v - t, None if ci is None else [ci[0] - t, ci[1] - t])
                      for (v, ci), t in zip(found[name], truths[name], strict=True)
                      if v is not None]
            out.append(_tally(name, condition, 0.0, errors + [(None, None)] * (
                len(found[name]) - len(errors)))[:5] + (float(np.mean(truths[name])),))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("evaluation", "drift"))
    parser.add_argument("--condition", default="",
                        help="run only the conditions whose label holds this text")
    parser.add_argument("--bootstrap", type=int, default=N_BOOTSTRAP,
                        help="the evaluation's replicates per interval (0: no intervals, so "
                             "bias and shown only, for many releases fast)")
    args = parser.parse_args(argv)
    rng, started = np.random.default_rng(args.seed), time.perf_counter()
    parts: list[Callable[[int, np.random.Generator, str], list[Row]]] = []
    if args.only != "drift":
        parts.append(lambda releases, rng, only: evaluation_rows(releases, rng, only,
                                                                 args.bootstrap))
    if args.only != "evaluation":
        parts.append(drift_rows)
    print(f"{'estimator':<20} {'condition':<50} {'truth':>7} {'shown':>6} {'bias':>8} "
          f"{'cover':>6}")
    for part in parts:
        for label, condition, shown, bias, cover, truth in part(args.releases, rng, args.condition):
            print(f"{label:<20} {condition:<50} {truth:7.4f} {shown:6.0%} {bias:+8.4f} "
                  f"{cover:6.2f}", flush=True)
    print(f"{args.releases} releases per condition, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
