"""Reported DP ROC-AUC against the model's exact AUC on the same evaluation rows.

The held-out evaluation releases one noisy histogram of score bin x outcome (``worker.evaluation``)
and reports the ROC-AUC of those noisy, binned counts. Two things move it off the model's true
AUC on the same rows: ties within a bin (discretisation) and the noise, which the non-negative
projection turns into counts in bins that hold almost no rows of a class (a pull towards 0.5).
Both depend on where the bins lie against the scores. This bench prints, for each table and
epsilon, the model's exact AUC (scikit-learn's ``roc_auc_score`` on the evaluation rows) beside
the reported one, with the legacy bins (a fixed probability grid made for a 2% outcome, plus the
band cut-offs) and with the current rule (``worker.dp_histogram.bin_edges``: log-odds steps around
the declared bands), in the same run, on the same models and rows.

Tables (public, 5,000+ rows; bands declared as a clinic would, from the published base rate, as
round numbers, never read off the rows):

* ``visits>=k``: the RAND Health Insurance Experiment (statsmodels ``randhie``, 20,190
  person-years, 7 features: coinsurance, deductible, incentive payment, maximum expenditure,
  physical limitation, chronic diseases, self-rated health as one 4-category feature). The
  outcome is derived by thresholding a public column, the number of outpatient visits:
  at least 1, 2, 3, 5, 8 or 10 visits gives prevalences from about 70% down to 6%. Subgroups:
  self-rated health (4 groups). Bounds from what each column is (log of a coinsurance rate of
  at most 100%, a count of chronic diseases, ...).
* ``fair``: statsmodels' extramarital-affairs survey (``bench/proxies.py``: 6,366 rows, 32%),
  its declared bands; subgroups: the wife's occupation (6 groups).
* ``crisis``: the service's own generator (``app.datasets.synthetic``, 20,000 rows, 2%), its
  built-in schema (bands 0.05 / 0.20, age band and sex subgroups). Below the goal's 5-70% range:
  here the goal is only to be at least as accurate as the legacy bins (root-mean-square error of
  one report).

Each seed is a fresh split (keyed coins under a new secret), a training job planned and trained
as the worker does (``app.jobs.service.plan`` with only the target epsilon, ``worker.tasks
.spec_of``, ``worker.training.train``), the worker's evaluate step (held-out noise matched to the
training, ``worker.calibration.calibrate_if_meaningful``'s rule and fit on the calibration
part, then ``worker.evaluation.evaluate`` on the evaluation part with the schema's band
thresholds and its subgroups), and ``draws`` fresh releases of the evaluation's noise per
model, since one job's reported figure is one draw. All noise is seeded (public tables only),
so a run is reproducible; the calibration's noise moves the scores against the bins, so a
table's mean gap over 3 seeds (``--quick``) can move by 0.01 with the seeds: cite the full run.

Columns: the model's AUC (mean over seeds); for each bin rule the mean reported AUC, its mean
gap, the worst seed's gap (mean over that seed's draws), the root-mean-square error of one
report (over all seeds and draws), and the number of bins. Goal: |mean gap| <= 0.02
with the current rule on every table of 5-70% prevalence at epsilon 1 and 3.

    .venv/bin/python bench/evaluation_auc.py            # 8 tables, 10 seeds, 20 draws (~1 min)
    .venv/bin/python bench/evaluation_auc.py --quick    # 8 tables, 3 seeds, 10 draws (~15 s)
    .venv/bin/python bench/evaluation_auc.py --shift -0.5   # every declared cut-off moved by
                                                            # -0.5 log-odds (robustness)

Needs statsmodels (the project's ``bench`` extra) for the RAND and Fair tables; without it only
``crisis`` runs.
"""

import argparse
import hashlib
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.bands import LOW_MEDIUM, MEDIUM_HIGH, cut_offs, model_thresholds  # noqa: E402
from app.datasets import parts as dataset_parts  # noqa: E402
from app.datasets import synthetic  # noqa: E402
from app.datasets.intake.table_store import IngestedTable  # noqa: E402
from app.datasets.patients import identity
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA  # noqa: E402
from app.datasets.schema.dataset_schema import DatasetSchema  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import proxies, proxy_study  # noqa: E402
from bench.proxy_declarations import Proxy, binary, categorical, numeric  # noqa: E402
from worker import dp_histogram, training  # noqa: E402
from worker.calibration import calibrate_model, size_floor_rows  # noqa: E402
from worker.evaluation import evaluate  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

EPSILONS = (1.0, 3.0)
GOAL = 0.02
GOAL_PREVALENCE = (0.05, 0.70)  # the goal's range; outside it: as accurate as the legacy bins
LEGACY_GRID = (0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.5,
               0.7, 0.9)
"""The legacy bins: fixed probability edges made for a rare outcome, and the cut-offs."""
VISITS = {1: (0.6, 0.85), 2: (0.4, 0.7), 3: (0.3, 0.6), 5: (0.15, 0.4), 8: (0.1, 0.25),
          10: (0.05, 0.2)}
"""RAND outcome 'at least k outpatient visits' -> its declared bands (low_medium, medium_high)."""

Groups = dict[str, tuple[np.ndarray, list[str]]]


@dataclass(frozen=True)
class Table:
    proxy: Proxy  # name, declared schema, raw rows, outcome
    groups: Callable[[np.ndarray], Groups]  # the declared subgroups of the rows in a mask


@dataclass
class Rule:
    """One bin rule's reports on one table at one epsilon, by seed."""

    gaps: list[list[float]] = field(default_factory=list)  # per seed: reported - true, per draw
    reported: list[float] = field(default_factory=list)
    bins: int = 0
    withheld: int = 0  # reports of no ROC-AUC (a class's noisy count below its noise floor)

    def mean_gap(self) -> float:
        return float(np.mean([g for seed in self.gaps for g in seed]))

    def worst_seed(self) -> float:
        means = [float(np.mean(seed)) for seed in self.gaps]
        return max(means, key=abs)

    def rmse(self) -> float:
        return float(np.sqrt(np.mean([g * g for seed in self.gaps for g in seed])))


@dataclass
class Cell:
    true: list[float] = field(default_factory=list)
    noise_std: float = 0.0
    rows: int = 0
    prevalence: float = 0.0
    legacy: Rule = field(default_factory=Rule)
    current: Rule = field(default_factory=Rule)


def _declared(schema: DatasetSchema, bands: tuple[float, float], subgroups: list[str],
              label: str) -> DatasetSchema:
    document = schema.model_dump(mode="json", by_alias=True)
    document["outcome"] |= {"label": label,
                            "bands": {"low_medium": bands[0], "medium_high": bands[1]}}
    document["subgroups"] = subgroups
    return DatasetSchema.model_validate(document)


def _feature_groups(schema: DatasetSchema, x: np.ndarray) -> Callable[[np.ndarray], Groups]:
    """The schema's subgroups of the rows in a mask, as ``app.datasets.parts`` builds them."""
    table = IngestedTable(features=x, outcome=np.zeros(len(x)),
                          ids=pa.array([str(i) for i in range(len(x))]), attributes={},
                          imputed={}, fingerprint="")
    return lambda member: dataset_parts._groups(schema, table, member)


def rand_visits() -> list[Table]:
    import statsmodels.api as sm

    frame = sm.datasets.randhie.load_pandas().data
    health = np.select([frame.hlthp == 1, frame.hlthf == 1, frame.hlthg == 1], [3, 2, 1], 0)
    x = np.column_stack([frame.lncoins, frame.idp, frame.lpi, frame.fmde, frame.physlm,
                         frame.disea, health]).astype(np.float64)
    features = [
        numeric("log_coinsurance", 0.0, 4.7, 0.0),  # log(1 + rate in %), rate <= 100
        binary("individual_deductible"),
        numeric("log_incentive", 0.0, 8.0, 6.0),  # log of a capped annual payment
        numeric("log_max_expenditure", 0.0, 10.0, 6.0),
        binary("physical_limitation"),
        numeric("chronic_diseases", 0.0, 100.0, 10.0),
        categorical("health", ["excellent", "good", "fair", "poor"], "good"),
    ]
    visits = frame.mdvis.to_numpy()
    tables = []
    for k, bands in VISITS.items():
        schema = DatasetSchema.model_validate({
            "features": features, "subgroups": ["health"],
            "outcome": {"name": "visits", "label": f"At least {k} outpatient visits a year",
                        "bands": {"low_medium": bands[0], "medium_high": bands[1]}}})
        proxy = Proxy(f"visits>={k}", schema, x, (visits >= k).astype(np.float64), True,
                              "statsmodels RAND HIE; outcome: a public column thresholded")
        tables.append(Table(proxy, _feature_groups(schema, x)))
    return tables


def fair() -> Table:
    proxy = proxies.fair()
    bands = cut_offs(model_thresholds(proxy.schema.outcome.bands))
    schema = _declared(proxy.schema, bands, ["occupation"], proxy.schema.outcome.label or "affair")
    proxy = Proxy(proxy.name, schema, proxy.x, proxy.y, True, proxy.note)
    return Table(proxy, _feature_groups(schema, proxy.x))


def crisis() -> Table:
    generated = synthetic.generate(20_000, 910_101)  # the seed bench/proxies.py uses
    proxy = Proxy("crisis", BUILT_IN_SCHEMA, generated.x, generated.y, False,
                          "the service's generator")
    return Table(proxy, lambda m: synthetic.subgroups(generated.x[m], generated.sex[m]))


def tables() -> list[Table]:
    try:
        return [*rand_visits(), fair(), crisis()]
    except ImportError:
        print("statsmodels is not installed (the bench extra): crisis only")
        return [crisis()]


def shifted(schema: DatasetSchema, by: float) -> DatasetSchema:
    """The schema with both cut-offs moved by ``by`` log-odds (a policy off the base rate)."""
    if by == 0:
        return schema
    low, high = (1 / (1 + math.exp(-(math.log(p / (1 - p)) + by)))
                 for p in cut_offs(model_thresholds(schema.outcome.bands)))
    return _declared(schema, (round(low, 6), round(high, 6)), schema.subgroups,
                     schema.outcome.label or "")


@contextmanager
def legacy_bins() -> Iterator[None]:
    """The legacy release bins: the fixed grid and the cut-offs."""
    current = dp_histogram.bin_edges

    def legacy(thresholds: dict[str, float]) -> np.ndarray:
        return np.unique(np.concatenate([LEGACY_GRID, cut_offs(thresholds)]))

    dp_histogram.bin_edges = legacy  # type: ignore[assignment]
    try:
        yield
    finally:
        dp_histogram.bin_edges = current


def split(table: Table, seed: int) -> tuple[proxy_study.Parts, np.ndarray]:
    proxy = table.proxy
    secret = hashlib.sha256(f"evaluation-auc:{proxy.name}:{seed}".encode()).hexdigest()
    part = identity.parts_of(range(len(proxy.y)), secret, scheme=identity.CURRENT_SCHEME)
    parts = proxy_study.Parts({p: proxy.x[part == p] for p in identity.Part},
                              {p: proxy.y[part == p] for p in identity.Part})
    return parts, part == identity.Part.EVALUATION


def report(y: np.ndarray, p: np.ndarray, groups: Groups, noise: float,
           thresholds: dict[str, float], seed: int) -> tuple[float | None, int]:
    """The evaluation's reported ROC-AUC (None when withheld) and its number of bins."""
    metrics = evaluate(y, p, groups=groups, noise_multiplier=noise, band_thresholds=thresholds,
                       rng=np.random.default_rng(seed), n_bootstrap=0)
    return metrics["roc_auc"], len(metrics["release"]["bins"]) - 1


def trained(proxy: Proxy, parts: proxy_study.Parts, eps: float,
            seed: int) -> tuple[np.ndarray, float]:
    """Plan, train and calibrate as the worker does; the evaluation rows' probabilities and the
    held-out noise multiplier (``worker.tasks.evaluate_step``)."""
    T, C, E = identity.Part  # noqa: N806
    encoder = encoder_for(proxy.schema)
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": eps},
                                        "training": {"seed": seed}})
    job = job_service.plan(dataset=proxy_study.dataset_for(proxy, parts), request=request)
    spec = spec_of(job)
    with proxy_study.seeded_noise(seed):
        result = training.train(parts.x[T], parts.y[T], spec, device=torch.device("cpu"),
                                encoder=encoder)
    history = [Mechanism(*step) for step in result.history]
    steps = result.history
    noise = held_out_noise(history, [spec.delta],
                           lambda delta: training.epsilon_of(steps, delta)[0])
    if len(parts.y[C]) >= size_floor_rows(noise):  # calibrate_if_meaningful, noise seeded
        calibrate_model(result.network, parts.x[C], parts.y[C], history=history,
                        delta=spec.delta, encoder=encoder, noise_multiplier=noise,
                        training_epsilon=training.epsilon_of(steps, spec.delta)[0],
                        rng=np.random.default_rng(seed))
    return training.predict_proba(result.network, parts.x[E], encoder), noise


def run_seed(table: Table, seed: int, draws: int, cells: dict[float, Cell]) -> None:
    """Train at each epsilon, then release the evaluation ``draws`` times under each bin rule."""
    proxy = table.proxy
    parts, evaluation = split(table, seed)
    groups = table.groups(evaluation)
    thresholds = model_thresholds(proxy.schema.outcome.bands)
    y = parts.y[identity.Part.EVALUATION]
    for eps, cell in cells.items():
        p, noise = trained(proxy, parts, eps, seed)
        true = float(roc_auc_score(y, p))
        cell.true.append(true)
        cell.noise_std = noise * math.sqrt(1 + len(groups))
        cell.rows, cell.prevalence = len(y), float(y.mean())
        for rule, context in ((cell.legacy, legacy_bins), (cell.current, _unchanged)):
            gaps = []
            with context():
                for draw in range(draws):
                    auc, rule.bins = report(y, p, groups, noise, thresholds,
                                            seed * 10_000 + draw)
                    if auc is None:
                        rule.withheld += 1
                        continue
                    rule.reported.append(auc)
                    gaps.append(auc - true)
            if gaps:
                rule.gaps.append(gaps)


@contextmanager
def _unchanged() -> Iterator[None]:
    yield


def verdict(cell: Cell) -> str:
    low, high = GOAL_PREVALENCE
    if low * 0.9 <= cell.prevalence <= high * 1.05:  # "about 5% to 70%"
        return "yes" if abs(cell.current.mean_gap()) <= GOAL else "no"
    return "kept" if cell.current.rmse() <= cell.legacy.rmse() else "worse"


def print_table(results: dict[str, dict[float, Cell]]) -> None:
    print("\n| table | eval rows | prevalence | ε | noise std | model AUC | legacy: reported | "
          "gap | worst seed | RMSE | bins | current: reported | gap | worst seed | RMSE | bins "
          "| goal |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, cells in results.items():
        for eps, c in cells.items():
            rules = " | ".join(
                f"{np.mean(r.reported):.4f} | {r.mean_gap():+.4f} | {r.worst_seed():+.4f} | "
                f"{r.rmse():.4f} | {r.bins}" for r in (c.legacy, c.current))
            print(f"| {name} | {c.rows} | {c.prevalence:.1%} | {eps:g} | {c.noise_std:.2f} | "
                  f"{np.mean(c.true):.4f} | {rules} | {verdict(c)} |")


def print_summary(results: dict[str, dict[float, Cell]]) -> None:
    cells = list(itertools.chain.from_iterable(c.values() for c in results.values()))
    in_range = [c for c in cells if verdict(c) in ("yes", "no")]
    if in_range:
        worst = {k: max(abs(getattr(c, k).mean_gap()) for c in in_range)
                 for k in ("legacy", "current")}
        print(f"\nTables of 5-70% prevalence: worst |mean gap| legacy {worst['legacy']:.4f}, "
              f"current {worst['current']:.4f}; goal (<= {GOAL}) held on "
              f"{sum(verdict(c) == 'yes' for c in in_range)} of {len(in_range)} (table, ε)")
    for name, cells_by_eps in results.items():
        for eps, c in cells_by_eps.items():
            if c.legacy.withheld or c.current.withheld:
                print(f"{name} at ε {eps:g}: ROC-AUC withheld (a class's noisy count below its "
                      f"noise floor) in {c.legacy.withheld} legacy and {c.current.withheld} "
                      f"current reports of {c.legacy.withheld + len(c.legacy.reported)}; the "
                      "columns average the rest")


def main(argv: list[str] | None = None) -> dict[str, dict[float, Cell]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, 10 draws (~15 s)")
    parser.add_argument("--seeds", type=int, help="training seeds per table (default 10)")
    parser.add_argument("--draws", type=int, help="evaluation releases per model (default 20)")
    parser.add_argument("--tables", help="comma-separated subset of the tables' names")
    parser.add_argument("--shift", type=float, default=0.0,
                        help="move every declared cut-off by this many log-odds")
    args = parser.parse_args(argv)
    seeds = args.seeds or (3 if args.quick else 10)
    draws = args.draws or (10 if args.quick else 20)
    torch.set_num_threads(1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    chosen = tables()
    if args.tables:
        chosen = [t for t in chosen if t.proxy.name in args.tables.split(",")]
    started, results = time.perf_counter(), {}
    print(f"{seeds} seeds x {draws} evaluation releases per table and ε; declared cut-offs "
          f"moved by {args.shift:+g} log-odds" if args.shift else
          f"{seeds} seeds x {draws} evaluation releases per table and ε")
    for table in chosen:
        schema = shifted(table.proxy.schema, args.shift)
        proxy = Proxy(table.proxy.name, schema, table.proxy.x, table.proxy.y,
                              table.proxy.real, table.proxy.note)
        table = Table(proxy, table.groups)
        cells = {eps: Cell() for eps in EPSILONS}
        for seed in range(seeds):
            run_seed(table, seed, draws, cells)
        results[proxy.name] = cells
        t = model_thresholds(schema.outcome.bands)
        print(f"{proxy.name}: bands {t[LOW_MEDIUM]:g} / {t[MEDIUM_HIGH]:g}, "
              f"{len(proxy.y):,} rows, done at {time.perf_counter() - started:.0f} s")
    print_table(results)
    print_summary(results)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
