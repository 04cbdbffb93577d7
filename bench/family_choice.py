"""Which family to fit, from public quantities: the defaults beside the dp_ebm family.

For each table, target epsilon and split, both run as the service runs them on the same parts
(``bench/proxy_study.py``'s keyed split): the defaults (a request with only
``target_epsilon``: plan, DP-SGD, DP calibration) and the ``dp_ebm`` family (its planned
release, ``fit_ebm`` at the planned noise, the additive network over the encoded inputs, the
DP calibration at the noise the worker matches to its event; ``--stretch`` another log-odds
stretch than the family's). AUC, log-loss and Brier are
exact on the evaluation part (public tables). Per cell it prints each one's mean (worst
split), the paired AUC difference (family - defaults) with its standard error over splits,
and the cell's public quantities (training rows, epsilon, delta, numeric and coded features,
declared categories); ``--json`` keeps every split's figures for a rule to be read off them
(``bench/family_rule.py``) without rerunning.

Two sets, fixed before any rule was chosen, so that a rule is judged on tables it was not
chosen on:

* ``choose``: the built generators at several sizes (``bends`` and ``coded``: effects that
  bend, many coded features; ``mixed``, ``wide``, ``strong``, ``crisis``), a fresh generator
  seed per split;
* ``confirm``: other sizes of the built generators with generator seeds the choose set never
  draws (``--seed-offset 100``), and the real public tables (statsmodels' fair, randhie,
  randhie_rare, anes96; sklearn's breast_cancer).

    .venv/bin/python bench/family_choice.py --set choose --splits 3 --json /tmp/choose.json
    .venv/bin/python bench/family_choice.py --tables bends@3000 --epsilons 1,3 --splits 2
"""

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.patients import identity  # noqa: E402
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind  # noqa: E402
from app.datasets.schema.encoding import Encoder, encoder_for  # noqa: E402
from app.families.dp_ebm import noise_of  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.fitted import RELEASE_KEY  # noqa: E402
from app.jobs.schemas import JobCreate  # noqa: E402
from app.privacy.accounting import epsilon_by_accountant  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import peers, proxies  # noqa: E402
from bench import proxy_study as study  # noqa: E402
from worker.calibration import calibrate_if_meaningful  # noqa: E402
from worker.training import predict_proba  # noqa: E402

EPSILONS = (0.5, 1.0, 3.0, 8.0)
SETS = {
    "choose": ["bends@1000", "bends@3000", "bends@10000", "coded@1000", "coded@3000",
               "coded@10000", "mixed@3000", "wide@30000", "strong@2500", "crisis@20000"],
    "confirm": ["bends@2000", "bends@6000", "coded@2000", "coded@6000", "mixed@10000",
                "fair", "randhie", "randhie_rare", "anes96", "breast_cancer"],
}
SPLITS = 3
SEED_OFFSET = {"choose": 0, "confirm": 100}


@dataclass(frozen=True)
class Public:
    """A cell's public quantities: what a rule may read."""

    n_train: int
    n_calibration: int
    epsilon: float
    delta: float
    numeric: int  # numeric and integer features
    binary: int
    categorical: int
    categories: int  # declared categories over the categorical features
    inputs: int  # the encoded width


def public_of(schema: DatasetSchema, parts: study.Parts, epsilon: float, delta: float,
              encoder: Encoder) -> Public:
    kinds = [f.kind for f in schema.features]
    return Public(
        n_train=len(parts.y[identity.Part.TRAIN]),
        n_calibration=len(parts.y[identity.Part.CALIBRATION]), epsilon=epsilon, delta=delta,
        numeric=sum(k not in (FeatureKind.BINARY, FeatureKind.CATEGORICAL) for k in kinds),
        binary=kinds.count(FeatureKind.BINARY), categorical=kinds.count(FeatureKind.CATEGORICAL),
        categories=sum(len(f.categories or ()) for f in schema.features
                       if f.kind is FeatureKind.CATEGORICAL),
        inputs=encoder.n_inputs)


def family_scores(table: proxies.Proxy, parts: study.Parts, epsilon: float,
                  noise_seed: int, stretch: float | None = None) -> peers.Scores:
    """The dp_ebm family as the worker runs it: plan, fit, stretch (``stretch``; None: the
    family's ``LOG_ODDS_STRETCH``), DP calibration, probabilities."""
    from app.families.ebm_layout import LOG_ODDS_STRETCH
    from app.families.ebm_network import additive_network, fit_ebm

    T, C, E = identity.Part  # noqa: N806
    stretch = LOG_ODDS_STRETCH if stretch is None else stretch
    request = JobCreate.model_validate({"dataset_id": 1, "privacy": {"target_epsilon": epsilon},
                                        "training": {"model": "dp_ebm"}})
    job = job_service.plan(dataset=study.dataset_for(table, parts), request=request)
    noise, encoder = noise_of(job.training[RELEASE_KEY]), encoder_for(table.schema)
    fitted = fit_ebm(table.schema, parts.x[T], parts.y[T], noise, random_state=noise_seed)
    network = additive_network(encoder, fitted.tables.stretched(stretch))
    history, delta = [noise.event], job.delta
    spent = lambda at: epsilon_by_accountant(history, at)["prv"]  # noqa: E731
    held_out = held_out_noise(history, [delta], spent)
    calibrate_if_meaningful(network, parts.x[C], parts.y[C], history=history, delta=delta,
                            training_epsilon=spent(delta), noise_multiplier=held_out,
                            encoder=encoder, rng=np.random.default_rng(noise_seed))
    return peers.scores(parts.y[E], predict_proba(network, parts.x[E], encoder))


@dataclass
class Row:
    """One split of one cell: its public quantities and both methods' exact scores."""

    table: str
    split: int
    public: Public
    defaults: peers.Scores | None
    family: peers.Scores
    extra: dict[str, Any] = field(default_factory=dict)


def run_table(spec: str, splits: int, epsilons: tuple[float, ...], offset: int,
              stretch: float | None = None) -> list[Row]:
    rows: list[Row] = []
    base = proxies.make(spec)
    for split in range(splits):
        table = base if base.real else proxies.make(spec, generator_seed=offset + split)
        parts, encoder = study.split(table, offset + split), encoder_for(table.schema)
        for eps in epsilons:
            request = study.request_for(parts, table, eps, split, {}, None)
            delta = job_service.plan(dataset=study.dataset_for(table, parts),
                                     request=request).delta
            ours = study.ours(table, parts, request, offset + split, study.Cell())
            rows.append(Row(spec, split, public_of(table.schema, parts, eps, delta, encoder),
                            ours, family_scores(table, parts, eps, offset + split, stretch)))
    return rows


def _mw(values: list[float], lower_is_better: bool) -> str:
    worst = max(values) if lower_is_better else min(values)
    return f"{np.mean(values):.3f} ({worst:.3f})"


def print_cells(spec: str, rows: list[Row]) -> None:
    first = rows[0].public
    print(f"\n### {spec}: {first.n_train} training rows, {first.numeric} numeric, "
          f"{first.binary} binary, {first.categorical} categorical ({first.categories} "
          f"categories), {first.inputs} inputs\n")
    print("| ε | AUC defaults | AUC dp_ebm | Δ AUC (SE) | log-loss defaults | log-loss dp_ebm "
          "| Brier defaults | Brier dp_ebm |")
    print("|---|---|---|---|---|---|---|---|")
    for eps in sorted({r.public.epsilon for r in rows}):
        cell = [r for r in rows if r.public.epsilon == eps and r.defaults is not None]
        if not cell:
            print(f"| {eps:g} | defaults refused |")
            continue
        ours = [r.defaults for r in cell if r.defaults is not None]
        ebm = [r.family for r in cell]
        diff = np.array([e.auc - o.auc for e, o in zip(ebm, ours, strict=True)])
        se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
        print(f"| {eps:g} | {_mw([s.auc for s in ours], False)} | "
              f"{_mw([s.auc for s in ebm], False)} | {diff.mean():+.3f} ({se:.3f}) | "
              f"{_mw([s.log_loss for s in ours], True)} | "
              f"{_mw([s.log_loss for s in ebm], True)} | "
              f"{_mw([s.brier for s in ours], True)} | {_mw([s.brier for s in ebm], True)} |")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="choose")
    parser.add_argument("--tables", help="comma-separated tables instead of a set")
    parser.add_argument("--splits", type=int, default=SPLITS)
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--seed-offset", type=int, help="generator seeds and splits from here "
                        "(default: the set's: 0 to choose, 100 to confirm)")
    parser.add_argument("--json", help="write every split's figures here")
    parser.add_argument("--stretch", type=float, help="the family's log-odds stretch "
                        "(default: the family's LOG_ODDS_STRETCH; 1: interpret's own scale)")
    args = parser.parse_args(argv)
    names = args.tables.split(",") if args.tables else SETS[args.set]
    offset = SEED_OFFSET[args.set] if args.seed_offset is None else args.seed_offset
    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    torch.set_num_threads(1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started, everything = time.perf_counter(), []
    for name in names:
        rows = run_table(name, args.splits, epsilons, offset, args.stretch)
        everything += rows
        print_cells(name, rows)
        if args.json:
            Path(args.json).write_text(json.dumps([asdict(r) for r in everything], indent=1))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return everything


if __name__ == "__main__":
    main()
