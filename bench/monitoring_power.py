"""Monitoring power: the smallest ROC-AUC drop and PSI a monitoring run detects with
80% power, and its false alarms on an unshifted follow-up, by the follow-up's size.

A monitoring run (``worker.monitoring.task``) makes one Gaussian release on the follow-up: the
training-time evaluation's score-bin x outcome histograms (overall, per age band and per sex)
and one histogram per feature, L2 sensitivity sqrt(1 + 2 + 6) = 3, at the run's target epsilon
and the follow-up's delta. Its verdicts compare that release with two releases on the training
cohort. This bench draws all three with the service's own code, for follow-ups of 2,000 /
20,000 / 200,000 rows at target epsilon 1:

* training-time evaluation: a job planned as the API plans it (``app.jobs.service.plan``:
  target epsilon 3 on 100,000 rows, budget delta 1e-7, the API test's model) fixes the
  held-out noise (``app.privacy.parallel.held_out_noise``); its evaluation part (15% of the
  rows, ``app.datasets.patients.identity.FRACTIONS``) is released by ``worker.evaluation.evaluate``;
* reference feature release: the statistics release a model's first run asks for on the
  training cohort (``app.monitoring.service.reference_request``, planned and calibrated by
  ``app.statistics`` at the run's target and the budget's delta), drawn here at its std;
* follow-up: fresh generator rows, noise from ``app.monitoring.service.noise_for`` at the
  target and delta 1 / (10 n), the largest a dataset of n rows may declare
  (``app.datasets.rules.max_delta``; a smaller delta adds noise), released by
  ``worker.monitoring.task.release_follow_up``;
* verdicts: ``worker.monitoring.drift.performance_drift`` (overall ROC-AUC) and
  ``feature_drift``, with the worker's 1,000 bootstrap replicates.

The model's scores are the generator's true probabilities: a model trained at epsilon 3 is
within about 0.005 of their ROC-AUC (``bench/utility.py``), and no training is needed.

Effects of a known size, on the population (the true, noiseless histograms):

* ROC-AUC drop d: a share f of the follow-up's rows take the score of a random row,
  independent of their outcome. With ties counted half, on any bins, the AUC becomes exactly
  A (1 - f) + f / 2 (A: the population's AUC on the release's bins, from 1,000,000 noiseless
  rows), so f = d / (A - 1/2);
* PSI: a share g of the rows take a PHQ-9 drawn as under the generator's documented shift
  (``phq9_and_outcome``: 8 to 27 instead of 0 to 27); the true PSI between the population's
  histograms on the public bins (1,000,000 noiseless rows of each) fixes g.

Each repeat draws the training cohort, its two releases, a follow-up and its noise afresh;
within a repeat every effect size reuses the same rows, noise and bootstrap seed (common random
numbers). Power: the share of repeats with "worse" (ROC-AUC) or "drift" (PHQ-9); printed: the
smallest effect on the grid with power >= 80%, flagged where a larger one falls below 80% again
(the PSI grid stops at 0.5: beyond, the mixture all but empties PHQ-9's lowest bins, where the
verdict's interval widens: on 2,000 rows power falls again from a PSI of 0.4). False alarms,
on the unshifted follow-up: the share of repeats with ROC-AUC "worse" (and "better"), and of
feature verdicts (6 per repeat) with "drift".

    .venv/bin/python bench/monitoring_power.py            # 200 repeats per size
    .venv/bin/python bench/monitoring_power.py --quick    # 20 repeats per size
"""

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.bands import model_thresholds  # noqa: E402
from app.datasets import synthetic  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.datasets.parts import PartRows  # noqa: E402
from app.datasets.patients import identity
from app.datasets.rules import max_delta  # noqa: E402
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.monitoring import service as monitoring_service  # noqa: E402
from app.monitoring.bins import schema_bins  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from app.statistics import noise as release_noise  # noqa: E402
from app.statistics import plan as statistics_plan  # noqa: E402
from worker import training  # noqa: E402
from worker.dp_histogram import bin_edges, bin_of, histogram  # noqa: E402
from worker.evaluation import evaluate, evaluated  # noqa: E402
from worker.histogram_metrics import roc_auc  # noqa: E402
from worker.monitoring.drift import NoisyHistogram, feature_drift, performance_drift  # noqa: E402
from worker.monitoring.task import N_BOOTSTRAP, release_follow_up  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

THRESHOLDS = model_thresholds(BUILT_IN_SCHEMA.outcome.bands)
BINS = schema_bins(BUILT_IN_SCHEMA)
PHQ9 = [b.name for b in BINS].index("phq9")
SIZES = (2_000, 20_000, 200_000)
DROPS = (0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2)
PSIS = (0.105, 0.11, 0.12, 0.135, 0.15, 0.175, 0.2, 0.25, 0.3, 0.4, 0.5)
POWER = 0.8
POPULATION = 1_000_000
_ONE = synthetic.generate(1, 0)
GROUPINGS = len(synthetic.subgroups(_ONE.x, _ONE.sex))  # age band, sex


@dataclass(frozen=True)
class Reference:
    """The training cohort's two releases as planned (public quantities only)."""

    training_rows: int
    evaluation_share: float
    noise_multiplier: float  # the training-time evaluation's
    feature_std: tuple[float, ...]  # each feature's cell std in the reference feature release
    training_epsilon: float
    budget_delta: float

    @property
    def evaluation_std(self) -> float:
        return self.noise_multiplier * math.sqrt(1 + GROUPINGS)


@dataclass(frozen=True)
class FollowUp:
    rows: int
    epsilon: float  # the run's target
    delta: float

    @property
    def noise_multiplier(self) -> float:
        return monitoring_service.noise_for(self.epsilon, self.delta)

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * math.sqrt(1 + GROUPINGS + len(BINS))


def plan_reference(training_rows: int = 100_000, training_epsilon: float = 3.0,
                   budget_delta: float = 1e-7, run_epsilon: float = 1.0) -> Reference:
    """Plan the training job and the reference feature release as the service does."""
    share = identity.FRACTIONS
    dataset = Dataset(
        id=1, name="training", source_kind="synthetic", n_rows=training_rows,
        n_train=round(training_rows * share[identity.Part.TRAIN]),
        n_calibration=round(training_rows * share[identity.Part.CALIBRATION]), seed=0,
        public=False, budget_delta=budget_delta,
        schema_json=BUILT_IN_SCHEMA.model_dump(mode="json", by_alias=True))
    job = job_service.plan(dataset=dataset, request=JobCreate.model_validate(
        {"dataset_id": 1, "privacy": {"target_epsilon": training_epsilon}}))
    spec = spec_of(job)
    history = [(spec.noise_multiplier, spec.sample_rate, spec.steps)]  # run to its end
    noise = held_out_noise([Mechanism(*step) for step in history], [spec.delta, budget_delta],
                           lambda delta: training.epsilon_of(history, delta)[0])
    request = monitoring_service.reference_request(BINS, run_epsilon)
    noises = release_noise.calibrate(
        statistics_plan.plan(schema=BUILT_IN_SCHEMA, request=request),
        mechanism=request.privacy.mechanism, epsilon=run_epsilon, delta=budget_delta)
    return Reference(training_rows, share[identity.Part.EVALUATION], noise,
                     tuple(vectors[0].scale for vectors in noises), training_epsilon,
                     budget_delta)


@dataclass(frozen=True)
class Effects:
    """Each effect size's mixing share, from the population's noiseless histograms."""

    auc: float  # A: the population's ROC-AUC on the release's bins
    drops: tuple[float, ...]
    mix: tuple[float, ...]  # f per drop
    psis: tuple[float, ...]
    shifted: tuple[float, ...]  # g per PSI


def _psi(reference: np.ndarray, follow_up: np.ndarray) -> float:
    return float(((follow_up - reference) * np.log(follow_up / reference)).sum())


def effects(drops: Sequence[float], psis: Sequence[float], seed: int = 0) -> Effects:
    """The shares f and g that give each AUC drop and each PSI on the population."""
    if not drops and not psis:  # unshifted follow-ups only
        return Effects(math.nan, (), (), (), ())
    table = synthetic.generate(POPULATION, seed)
    edges = bin_edges(THRESHOLDS)
    counts = histogram(bin_of(table.p, edges), table.y.astype(np.int64), len(edges) + 1)[0]
    auc = float(roc_auc(counts[:, 0], counts[:, 1]))
    phq9 = BINS[PHQ9]
    shifted = synthetic.generate(POPULATION, seed + 1, synthetic.PHQ9_AND_OUTCOME)
    r, q = (np.bincount(phq9.codes(t.x[:, PHQ9]), minlength=phq9.n_bins) / POPULATION
            for t in (table, shifted))
    shares = []
    for target in psis:
        low, high = 0.0, 1.0 - 1e-9
        for _ in range(60):  # PSI rises with g: bisection
            mid = 0.5 * (low + high)
            low, high = (mid, high) if _psi(r, (1 - mid) * r + mid * q) < target else (low, mid)
        shares.append(high)
    return Effects(auc, tuple(drops), tuple(d / (auc - 0.5) for d in drops), tuple(psis),
                   tuple(shares))


@dataclass
class Tally:
    """Verdict counts over repeats at one follow-up size."""

    follow_up: FollowUp
    n_drops: int
    n_psis: int
    repeats: int = 0
    worse: np.ndarray | None = None  # (n_drops,) repeats with "worse"
    drift: np.ndarray | None = None  # (n_psis,) repeats with PHQ-9 "drift"
    withheld: int = 0  # repeats whose unshifted ROC-AUC was withheld (noise floor)
    null_worse: int = 0
    null_better: int = 0
    null_drift: int = 0  # feature verdicts "drift" on the unshifted follow-up
    null_features: int = 0

    def __post_init__(self) -> None:
        self.worse = np.zeros(self.n_drops, dtype=int)
        self.drift = np.zeros(self.n_psis, dtype=int)

    def power(self, kind: str) -> np.ndarray:
        counts = self.worse if kind == "auc" else self.drift
        assert counts is not None
        return counts / max(self.repeats, 1)


def _overall(record: dict[str, Any]) -> dict[str, Any]:
    """A release record without its subgroups: the overall verdict is the same, faster."""
    return {**record, "histograms": {"all": record["histograms"]["all"]}}


def _auc_verdict(reference: dict[str, Any], release: Any, seed: int, n_bootstrap: int) -> Any:
    follow_up = _overall(evaluated(release, THRESHOLDS, np.random.default_rng(seed), 0)["release"])
    out = performance_drift(reference, follow_up, thresholds=THRESHOLDS,
                            rng=np.random.default_rng(seed), n_bootstrap=n_bootstrap)
    return out["overall"]["roc_auc"]


def _training_releases(reference: Reference, rng: np.random.Generator
                       ) -> tuple[dict[str, Any], list[NoisyHistogram]]:
    """A training cohort's evaluation record (overall) and its reference feature release."""
    cohort = synthetic.generate(reference.training_rows, int(rng.integers(2**62)))
    part = rng.random(reference.training_rows) < reference.evaluation_share
    record = evaluate(cohort.y[part], cohort.p[part],
                      groups=synthetic.subgroups(cohort.x[part], cohort.sex[part]),
                      noise_multiplier=reference.noise_multiplier, band_thresholds=THRESHOLDS,
                      rng=rng, n_bootstrap=0)["release"]
    features = [NoisyHistogram(np.bincount(b.codes(cohort.x[:, k]), minlength=b.n_bins)
                               + rng.normal(0.0, std, b.n_bins), std)
                for k, (b, std) in enumerate(zip(BINS, reference.feature_std, strict=True))]
    return _overall(record), features


def repeat(reference: Reference, tally: Tally, plan: Effects, seed: Sequence[int],
           n_bootstrap: int = N_BOOTSTRAP) -> None:
    """One repeat at one size: the unshifted follow-up, then every effect on the same rows."""
    rng = np.random.default_rng(seed)
    ref_record, ref_features = _training_releases(reference, rng)
    edges = np.asarray(ref_record["bins"][1:-1], dtype=float)
    n = tally.follow_up.rows
    rows = synthetic.generate(n, int(rng.integers(2**62)))
    moved = synthetic.generate(n if plan.shifted else 0, int(rng.integers(2**62)),
                               synthetic.PHQ9_AND_OUTCOME)
    u_score, u_phq9, partner = rng.random(n), rng.random(n), rng.integers(0, n, n)
    groups = synthetic.subgroups(rows.x, rows.sex)
    noise_seed, boot_seed = (int(s) for s in rng.integers(2**62, size=2))

    def release(x: np.ndarray, p: np.ndarray) -> Any:
        return release_follow_up(PartRows(x, rows.y, groups, len(rows.y)), p, edges=edges,
                                 bins=BINS, noise_multiplier=tally.follow_up.noise_multiplier,
                                 rng=np.random.default_rng(noise_seed))

    tally.repeats += 1
    unshifted, follow = release(rows.x, rows.p)
    auc = _auc_verdict(ref_record, unshifted, boot_seed, n_bootstrap)
    tally.withheld += auc["follow_up"] is None or auc["reference"] is None
    tally.null_worse += auc["verdict"] == "worse"
    tally.null_better += auc["verdict"] == "better"
    boot = np.random.default_rng(boot_seed)
    for k, b in enumerate(BINS):
        found = feature_drift(ref_features[k], NoisyHistogram(follow[b.name], unshifted.noise_std),
                              centres=np.asarray(b.centres), rng=boot, n_bootstrap=n_bootstrap)
        tally.null_drift += found["verdict"] == "drift"
        tally.null_features += 1
    assert tally.worse is not None and tally.drift is not None
    for i, f in enumerate(plan.mix):
        mixed, _ = release(rows.x, np.where(u_score < f, rows.p[partner], rows.p))
        tally.worse[i] += _auc_verdict(ref_record, mixed, boot_seed, n_bootstrap)["verdict"] == (
            "worse")
    for i, g in enumerate(plan.shifted):
        x = rows.x.copy()
        x[:, PHQ9] = np.where(u_phq9 < g, moved.x[:, PHQ9], x[:, PHQ9])
        released, follow = release(x, rows.p)
        found = feature_drift(ref_features[PHQ9],
                              NoisyHistogram(follow[BINS[PHQ9].name], released.noise_std),
                              centres=np.asarray(BINS[PHQ9].centres),
                              rng=np.random.default_rng(boot_seed), n_bootstrap=n_bootstrap)
        tally.drift[i] += found["verdict"] == "drift"


def slope_verdict(reference: Reference, follow_up: FollowUp, seed: Sequence[int],
                  n_bootstrap: int = 500) -> str:
    """The overall calibration slope's verdict of one unshifted follow-up against a fresh
    training-time evaluation (tests/worker/test_monitoring_false_alarms.py)."""
    rng = np.random.default_rng(seed)
    ref_record, _ = _training_releases(reference, rng)
    rows = synthetic.generate(follow_up.rows, int(rng.integers(2**62)))
    released, _ = release_follow_up(
        PartRows(rows.x, rows.y, synthetic.subgroups(rows.x, rows.sex), len(rows.y)), rows.p,
        edges=np.asarray(ref_record["bins"][1:-1], dtype=float), bins=BINS,
        noise_multiplier=follow_up.noise_multiplier, rng=rng)
    record = _overall(evaluated(released, THRESHOLDS, rng, 0)["release"])
    found = performance_drift(ref_record, record, thresholds=THRESHOLDS, rng=rng,
                              n_bootstrap=n_bootstrap)
    return str(found["overall"]["calibration_slope"]["verdict"])


def simulate(reference: Reference, follow_up: FollowUp, plan: Effects, repeats: int, *,
             seed: int = 0, n_bootstrap: int = N_BOOTSTRAP) -> Tally:
    """``repeats`` independent repeats at one follow-up size (seeded: reproducible)."""
    tally = Tally(follow_up, len(plan.drops), len(plan.psis))
    for r in range(repeats):
        repeat(reference, tally, plan, seed=(seed, follow_up.rows, r), n_bootstrap=n_bootstrap)
    return tally


def smallest(grid: Sequence[float], power: np.ndarray, target: float = POWER) -> float | None:
    """The smallest grid value with at least ``target`` power (None: no such value)."""
    return next((value for value, p in zip(grid, power, strict=True) if p >= target), None)


def _rate(count: int, total: int) -> str:
    return f"{100 * count / max(total, 1):.1f}% ({count}/{total})"


def _smallest_text(grid: Sequence[float], power: np.ndarray, withheld: bool) -> str:
    """The smallest effect found with 80% power, flagged where a larger one falls below it."""
    found = smallest(grid, power)
    if withheld or found is None:
        return "none: ROC-AUC withheld (noise floor)" if withheld else f"above {grid[-1]:g}"
    below = [v for v, p in zip(grid, power, strict=True) if v > found and p < POWER]
    return f"{found:g}" + (f" (below 80% again from {below[0]:g})" if below else "")


def report(reference: Reference, plan: Effects, tallies: list[Tally]) -> None:
    r = tallies[0].repeats if tallies else 0
    print(f"## Monitoring power: target epsilon {tallies[0].follow_up.epsilon:g}, "
          f"{r} repeats per size, {N_BOOTSTRAP} bootstrap replicates\n")
    print(f"Reference: training cohort {reference.training_rows:,} rows (job at epsilon "
          f"{reference.training_epsilon:g}, delta {reference.budget_delta:g}); training-time "
          f"evaluation on {reference.evaluation_share:.0%} of it at noise multiplier "
          f"{reference.noise_multiplier:.3f} (std {reference.evaluation_std:.2f} per cell); "
          f"reference feature release std {reference.feature_std[0]:.2f} per cell. Scores: "
          f"the generator's true probabilities, population ROC-AUC on the release's bins "
          f"{plan.auc:.4f}.\n")
    print("| follow-up rows | delta | noise std per cell | ROC-AUC withheld | smallest AUC drop "
          "(80% power) | smallest PSI (80% power) | unshifted: ROC-AUC \"worse\" | "
          "unshifted: ROC-AUC \"better\" | unshifted: feature \"drift\" |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in tallies:
        print(f"| {t.follow_up.rows:,} | {t.follow_up.delta:.0e} | {t.follow_up.noise_std:.2f} | "
              f"{t.withheld / max(t.repeats, 1):.0%} | "
              f"{_smallest_text(plan.drops, t.power('auc'), t.withheld == t.repeats)} | "
              f"{_smallest_text(plan.psis, t.power('psi'), False)} | "
              f"{_rate(t.null_worse, t.repeats)} | {_rate(t.null_better, t.repeats)} | "
              f"{_rate(t.null_drift, t.null_features)} |")
    header = " | ".join(f"{t.follow_up.rows:,}" for t in tallies)
    rule = "|".join("---:" for _ in range(len(tallies) + 1))
    for kind, grid, label in (("auc", plan.drops, "ROC-AUC drop d (\"worse\")"),
                              ("psi", plan.psis, "true PSI (PHQ-9 \"drift\")")):
        print(f"\nPower by effect size (share of repeats), by follow-up rows:\n\n"
              f"| {label} | {header} |\n|{rule}|")
        for i, value in enumerate(grid):
            print(f"| {value:g} | " + " | ".join(f"{t.power(kind)[i]:.2f}" for t in tallies)
                  + " |")


def main(argv: list[str] | None = None) -> list[Tally]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 repeats per size")
    parser.add_argument("--repeats", type=int, help="repeats per size (default 200)")
    parser.add_argument("--sizes", help="comma-separated follow-up sizes (default 2000,20000,"
                                        "200000)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="the run's target")
    parser.add_argument("--training-rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    repeats = args.repeats or (20 if args.quick else 200)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(SIZES)
    started = time.perf_counter()
    reference = plan_reference(args.training_rows, run_epsilon=args.epsilon)
    plan = effects(DROPS, PSIS, seed=args.seed)
    tallies = [simulate(reference, FollowUp(n, args.epsilon, max_delta(n)), plan, repeats,
                        seed=args.seed) for n in sizes]
    report(reference, plan, tallies)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return tallies


if __name__ == "__main__":
    main()
