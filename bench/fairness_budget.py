"""Fairness gaps under varying privacy budgets on a known subgroup effect.

The founding article's "fairness metrics under varying privacy budgets", answered for the
schema's own groups: how the training-time evaluation's subgroup gaps and their intervals move
with epsilon, on a table whose gap is known by construction.

Setting: the generator with its documented subgroup effect (``app.datasets.synthetic``,
``"subgroup_effect"``: for patients aged 65 and over the outcome follows low functioning rather
than depression and history, so a model trained on everyone ranks that age band worse), at
50,000 and 200,000 rows (50,000 with ``--quick``), registered as the service registers a
generator dataset (``app.datasets.parts.load_parts``: train / calibration / evaluation parts by
keyed coins, with the age-band and sex groupings). Each seed is its own table (generator seed
and coin secret), so the verdict counts cover the sampling as well as the noise. On each table
and for each target epsilon (0.5, 1, 2, 4, 8), a default job is planned
and trained as the worker does (``app.jobs.service.plan`` with only the target,
``worker.tasks.spec_of``, ``worker.training.train`` with its noise seeded), then the worker's
own evaluate step (``worker.tasks.evaluate_step``: DP calibration and the one Gaussian release
of the evaluation, its noise from OS entropy as in the service), then
``worker.monitoring.fairness.fairness_gaps`` on that release record, as a monitoring run does.

Per grouping, group (against its grouping's largest group, the service's reference) and gap
metric (ROC-AUC, calibration-in-the-large, recall and precision of the high band): the median
noisy gap over the jobs where it was reported, the median width of its 95% interval (medians:
a metric just above its noise floor has a wild interval now and then), the verdict
counts (gap / no gap / inconclusive; a metric below its noise floor is inconclusive), and the
exact gap of the same model on the same evaluation rows and bins (noise-free counts: what the
release would show without DP). Then the verdict counts by epsilon, and a summary: the 65-80
band's ROC-AUC gap (the effect) and how often the sex grouping, which has no effect by
construction (every gap is 0 in the population), gets the verdict "gap" (false alarms). The
calibration's and the evaluation's noise are fresh OS entropy per job as in the worker (only
the training noise is seeded), so two runs differ within the spread the verdict counts show.

    .venv/bin/python bench/fairness_budget.py            # 50,000 and 200,000 rows, 24 tables
    .venv/bin/python bench/fairness_budget.py --quick    # 50,000 rows, 2 tables
"""

import argparse
import hashlib
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets import parts as dataset_parts  # noqa: E402
from app.datasets import synthetic  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.datasets.patients import identity
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.datasets.service import BUILT_IN_SCHEMA_JSON  # noqa: E402
from app.flows.job_run import LoadedData, TrainedNetwork  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from bench.proxy_study import seeded_noise  # noqa: E402
from worker import training  # noqa: E402
from worker.dp_histogram import bin_edges, bin_of, histogram  # noqa: E402
from worker.monitoring.drift import side_metrics  # noqa: E402
from worker.monitoring.fairness import GAP_METRICS, fairness_gaps  # noqa: E402
from worker.tasks import evaluate_step, spec_of  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
VERDICTS = ("gap", "no_gap", "inconclusive")
DATA_SEED = 930_001  # the first of the generator seeds (one per table) no other bench uses
FULL_ROWS, FULL_SEEDS = (50_000, 200_000), 24
QUICK_ROWS, QUICK_SEEDS = (50_000,), 2
OLDER_BAND = "65-80"  # the band the effect is in (synthetic.OLDER_FROM_AGE up)
N_BOOTSTRAP = 1000  # as worker.monitoring.task

Key = tuple[float, str, str, str, str]  # epsilon, grouping, group, reference group, metric


@dataclass
class Cell:
    """One gap at one epsilon, over tables."""

    gaps: list[float] = field(default_factory=list)  # reported noisy gaps
    widths: list[float] = field(default_factory=list)  # their intervals' widths
    exact: list[float] = field(default_factory=list)  # the same model's noise-free gap
    verdicts: Counter[str] = field(default_factory=Counter)

    def verdict_counts(self) -> str:
        return " / ".join(str(self.verdicts[v]) for v in VERDICTS)


def registration(n_rows: int, seed: int) -> Dataset:
    """The unsaved generator dataset ``app.datasets.service`` would register (private): the
    table of generator seed ``DATA_SEED + seed``, its parts keyed by a secret of its own."""
    secret = hashlib.sha256(f"fairness-budget:{seed}".encode()).hexdigest()
    counts = identity.part_counts(identity.parts_of(range(n_rows), secret,
                                                    scheme=identity.CURRENT_SCHEME))
    return Dataset(id=1, name="fairness-budget", source_kind="synthetic",
                   synthetic_shift=synthetic.SUBGROUP_EFFECT, n_rows=n_rows,
                   n_train=counts[identity.Part.TRAIN],
                   n_calibration=counts[identity.Part.CALIBRATION], seed=DATA_SEED + seed,
                   record_secret=secret, coin_scheme=identity.CURRENT_SCHEME, public=False,
                   budget_delta=None, schema_json=BUILT_IN_SCHEMA_JSON)


def load(dataset: Dataset) -> LoadedData:
    """What ``app.flows.job_run.load`` reads for a job on the dataset."""
    return LoadedData(split=dataset_parts.load_parts(dataset),
                      encoder=encoder_for(dataset_parts.schema_of(dataset)),
                      ledger_deltas=() if dataset.budget_delta is None
                      else (dataset.budget_delta,))


Metrics = dict[tuple[str, str], dict[str, float]]  # (grouping, group) -> gap metric -> value


def exact_metrics(loaded: LoadedData, probability: np.ndarray,
                  thresholds: dict[str, float]) -> Metrics:
    """Each group's gap metrics on the noise-free counts of the release's own histograms (its
    bins: ``worker.dp_histogram.bin_edges`` of the thresholds)."""
    evaluation = loaded.split.evaluation
    edges = bin_edges(thresholds)
    bins, y = bin_of(probability, edges), evaluation.y.astype(np.int64)
    out: Metrics = {}
    for grouping, (codes, labels) in evaluation.groups.items():
        counts = histogram(bins, y, len(edges) + 1, codes, len(labels))
        stats = side_metrics(counts, edges, thresholds)
        for g, label in enumerate(labels):
            out[(grouping, label)] = {m: float(stats[m][g]) for m in GAP_METRICS}
    return out


def default_job(dataset: Dataset, loaded: LoadedData, epsilon: float,
                seed: int) -> TrainedNetwork:
    """A default job at ``epsilon``, planned, trained (noise seeded, on the parts' public sizes)
    and calibrated, then evaluated by the worker's own steps."""
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": epsilon},
                                        "training": {"seed": seed}})
    spec = spec_of(job_service.plan(dataset=dataset, request=request))
    train = loaded.split.train
    with seeded_noise(seed):
        result = training.train(train.x, train.y, spec, device=torch.device("cpu"),
                                encoder=loaded.encoder, planned_rows=train.rows)
    return evaluate_step(spec, result, loaded)  # calibrated, then the evaluation release


def one_job(dataset: Dataset, loaded: LoadedData, epsilon: float,
            seed: int) -> tuple[list[dict[str, Any]], Metrics]:
    """A default job at ``epsilon``: the release's gaps and the same model's exact metrics."""
    trained = default_job(dataset, loaded, epsilon, seed)
    thresholds = dict(trained.metrics["band_thresholds"])
    gaps = fairness_gaps(trained.metrics["release"], thresholds=thresholds,
                         rng=np.random.default_rng(), n_bootstrap=N_BOOTSTRAP)
    probability = training.predict_proba(trained.network, loaded.split.evaluation.x,
                                         loaded.encoder)
    return gaps, exact_metrics(loaded, probability, thresholds)


def collect(n_rows: int, seeds: int, epsilons: Sequence[float] = EPSILONS) -> dict[Key, Cell]:
    """Every gap at every epsilon over ``seeds`` tables (a fresh generator table and split
    each: one shared table would make every job see the same sample gaps), each table's jobs at
    every epsilon."""
    cells: dict[Key, Cell] = {}
    for seed in range(seeds):
        dataset = registration(n_rows, seed)
        loaded = load(dataset)
        for epsilon in epsilons:
            gaps, exact = one_job(dataset, loaded, epsilon, seed)
            for gap in gaps:
                key = (epsilon, gap["grouping"], gap["group"], gap["reference_group"],
                       gap["metric"])
                cell = cells.setdefault(key, Cell())
                cell.verdicts[gap["verdict"]] += 1
                metric = gap["metric"]
                cell.exact.append(exact[(key[1], key[2])][metric]
                                  - exact[(key[1], key[3])][metric])
                if gap["gap"] is not None:
                    cell.gaps.append(gap["gap"])
                if gap["gap_ci"] is not None:
                    cell.widths.append(gap["gap_ci"][1] - gap["gap_ci"][0])
    return cells


def _median(values: list[float]) -> str:
    finite = [v for v in values if np.isfinite(v)]
    return f"{np.median(finite):+.3f}" if finite else "n/a"


def _width(cell: Cell) -> str:
    return f"{np.median(cell.widths):.3f}" if cell.widths else "n/a"


def print_details(cells: dict[Key, Cell]) -> None:
    """Per gap metric: every group at every epsilon."""
    for metric in GAP_METRICS:
        print(f"\n### {metric}: group minus reference (largest group of its grouping)\n")
        print("| epsilon | group vs reference | noisy gap (median, reported) | "
              "interval width (median) | gap / no gap / inconclusive | exact gap (median) |")
        print("|---:|---|---:|---:|---|---:|")
        for (eps, grouping, group, ref, m), cell in sorted(cells.items()):
            if m == metric:
                print(f"| {eps:g} | {grouping}: {group} vs {ref} | {_median(cell.gaps)} "
                      f"({len(cell.gaps)} of {sum(cell.verdicts.values())}) | {_width(cell)} | "
                      f"{cell.verdict_counts()} | {_median(cell.exact)} |")


def print_verdicts(cells: dict[Key, Cell], seeds: int) -> None:
    """Verdict counts by epsilon, one row per group and metric."""
    epsilons = sorted({key[0] for key in cells})
    print(f"\n### Verdicts (gap / no gap / inconclusive of {seeds} jobs) by epsilon\n")
    print("| group vs reference | metric | " + " | ".join(f"ε {e:g}" for e in epsilons) + " |")
    print("|---|---|" + "---|" * len(epsilons))
    for grouping, group, ref, metric in sorted({k[1:] for k in cells}):
        counts = [cells[(e, grouping, group, ref, metric)].verdict_counts()
                  if (e, grouping, group, ref, metric) in cells else "-" for e in epsilons]
        print(f"| {grouping}: {group} vs {ref} | {metric} | " + " | ".join(counts) + " |")


def _pooled(cells: dict[Key, Cell], epsilon: float, grouping: str, group: str | None,
            metric: str | None) -> Cell:
    """The cells at ``epsilon`` of a grouping (one group or all, one metric or all) pooled."""
    out = Cell()
    for (eps, g, label, _, m), cell in cells.items():
        if eps == epsilon and g == grouping and group in (None, label) and metric in (None, m):
            out.gaps += cell.gaps
            out.widths += cell.widths
            out.exact += cell.exact
            out.verdicts += cell.verdicts
    return out


def print_summary(results: dict[int, dict[Key, Cell]]) -> None:
    """The effect's ROC-AUC gap, and the false gaps on sex (no effect by construction)."""
    print("\n## Summary: the 65-80 band's ROC-AUC gap, and sex (no effect: every gap is 0)\n")
    print("| rows | epsilon | 65-80 ROC-AUC gap / no gap / inconclusive | noisy gap (median) | "
          "interval width (median) | exact gap (median) | sex: gap verdicts of all (4 metrics) |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for rows, cells in results.items():
        for eps in sorted({key[0] for key in cells}):
            older = _pooled(cells, eps, "age", OLDER_BAND, "roc_auc")
            sex = _pooled(cells, eps, "sex", None, None)
            print(f"| {rows:,} | {eps:g} | {older.verdict_counts()} | {_median(older.gaps)} | "
                  f"{_width(older)} | {_median(older.exact)} | "
                  f"{sex.verdicts['gap']} of {sum(sex.verdicts.values())} |")


def main(argv: Sequence[str] | None = None) -> dict[int, dict[Key, Cell]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_ROWS[0]:,} rows, {QUICK_SEEDS} seeds")
    parser.add_argument("--rows", type=int, nargs="+", default=None)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    args = parser.parse_args(argv)
    sizes = args.rows or list(QUICK_ROWS if args.quick else FULL_ROWS)
    seeds = args.seeds or (QUICK_SEEDS if args.quick else FULL_SEEDS)
    torch.set_num_threads(1)
    started = time.perf_counter()
    results = {}
    for rows in sizes:
        print(f"\n## {rows:,} rows: generator {synthetic.SUBGROUP_EFFECT!r}, {seeds} tables "
              f"(seeds {DATA_SEED} on), one default job per table and epsilon")
        results[rows] = collect(rows, seeds, args.epsilons)
        print_details(results[rows])
        print_verdicts(results[rows], seeds)
    print_summary(results)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
