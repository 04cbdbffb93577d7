"""Defaults on data nobody tuned them on: the product's recipe beside its peers.

For each table and each target epsilon (0.5, 1, 3, 8) the product's own path runs on the
table's parts (train / calibration / evaluation by keyed coins, ``app.datasets.patients.identity``):
``app.jobs.service.plan`` with a default request (only ``target_epsilon`` set), the worker's
``spec_of`` and ``train``, then ``worker.calibration.calibrate_if_meaningful`` at the held-out
noise the worker uses (``app.privacy.parallel.held_out_noise``). AUC, log-loss and Brier are
computed exactly on the evaluation part (public tables: exact figures are fine here; the
service itself releases them with noise).

Peers, on the same training rows (``bench/baselines.py``, ``bench/peers.py``): Opacus as a
tutorial user runs it (batch 256 or the whole part, 20 epochs, SGD lr 0.5, clip 1, Poisson),
diffprivlib's logistic regression, DP-EBM (InterpretML's DP explainable boosting, on the raw
rows with the declared public bounds), the base rate (non-DP: the training part's prevalence;
and a DP one at the cell's budget) and non-private logistic regression. Each cell shows the
mean (worst) over splits of AUC, log-loss and Brier; the goals are ``bench/proxy_report.py``'s.
On tables of 900+ rows one job (split 0) is repeated with fresh noise and the log-loss
spread printed.

Two sets, so a rule is judged on tables it was not chosen on:

* the proxy set (rules are chosen on it): the built generators (``bench/proxies.py``) at
  small and middling sizes, a fresh generator seed per split (``strong``, a 40% outcome a
  few inputs nearly decide, joined it after anes96's log-loss misses at epsilon 1 and 3:
  the shape of a table where those misses can be studied without choosing on anes96;
  ``bends`` and ``coded``, effects that bend and many coded features, joined it with the
  dp_ebm family: where an additive boosted model might be ahead);
* the confirmation set (never chosen on): four real public tables shipped in sklearn and
  statsmodels (breast_cancer, anes96, fair, randhie with two outcomes: 69% and 6%; the
  clip and calibration rules saw breast_cancer and fair while they were chosen, the
  capped-regime and probability rules saw none of them).

    .venv/bin/python bench/proxy_study.py --set proxy          # 8-19 min (one thread)
    .venv/bin/python bench/proxy_study.py --set confirmation   # about 16 min
    .venv/bin/python bench/proxy_study.py --tables fair --seeds 2 --epsilons 1
    .venv/bin/python bench/proxy_study.py --tables mixed@430 --delta max   # a large delta
"""

import argparse
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.errors import InvalidRequest  # noqa: E402
from app.datasets import record_coins  # noqa: E402
from app.datasets.models import Dataset  # noqa: E402
from app.datasets.patients import identity
from app.datasets.rules import max_delta  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import recipe  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.jobs.schemas import JobCreate, TrainingConfig  # noqa: E402
from app.jobs.size_floor import CALIBRATION_WITHHELD  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import baselines, peers, proxies  # noqa: E402
from bench.peers import Scores  # noqa: E402
from bench.proxy_report import SPREAD_ROWS, Cell, print_summary, print_table  # noqa: E402
from worker import calibration, platt_fit, training  # noqa: E402
from worker.calibration import COARSE_METHOD, calibrate_if_meaningful  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

EPSILONS = (0.5, 1.0, 3.0, 8.0)
SETS = {
    "proxy": ["mixed@800", "mixed@3000", "crisis@20000", "wide@30000", "strong@1000",
              "strong@2500", "bends@3000", "coded@3000"],
    "confirmation": ["breast_cancer", "anes96", "fair", "randhie", "randhie_rare"],
}
SPLITS, REPEATS = 5, 5
BUDGET_DELTA: dict[str, str] = {"rule": "default"}
"""``--delta``: "default" (the service's, at most 1e-5) or "max" (a budget at the largest delta
a dataset may declare, 1/(10 n_rows): where 1,000 full-batch steps reach epsilon 1 on small
tables)."""


@dataclass
class Parts:
    x: dict[identity.Part, np.ndarray]
    y: dict[identity.Part, np.ndarray]


def split(proxy: proxies.Proxy, seed: int) -> Parts:
    secret = hashlib.sha256(f"proxy-study:{proxy.name}:{seed}".encode()).hexdigest()
    part = identity.parts_of(range(len(proxy.y)), secret,  # v1: comparable with
                             scheme=record_coins.BLAKE2B_V1)  # earlier runs' figures
    return Parts({p: proxy.x[part == p] for p in identity.Part},
                 {p: proxy.y[part == p] for p in identity.Part})


def dataset_for(proxy: proxies.Proxy, parts: Parts) -> Dataset:
    """The unsaved registration ``plan`` reads: row counts and the declared schema."""
    n = {p: len(parts.y[p]) for p in identity.Part}
    rows = sum(n.values())
    return Dataset(id=1, name=proxy.name, source_kind="upload", n_rows=rows,
                   n_train=n[identity.Part.TRAIN], n_calibration=n[identity.Part.CALIBRATION],
                   seed=0, public=False,
                   budget_delta=max_delta(rows) if BUDGET_DELTA["rule"] == "max" else None,
                   schema_json=proxy.schema.model_dump(mode="json", by_alias=True))


@contextmanager
def seeded_noise(seed: int) -> Iterator[None]:
    """The worker's secret generators, seeded for a reproducible bench (public proxies only)."""
    original, counter = training.secret_generator, itertools.count()
    training.secret_generator = lambda device: torch.Generator(device=device).manual_seed(
        seed * 1_000 + next(counter))
    try:
        yield
    finally:
        training.secret_generator = original


def metrics(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """(AUC, log-loss) of probabilities ``p``: what ``bench/small_table_ceiling.py`` reads."""
    scored = peers.scores(y, p)
    return scored.auc, scored.log_loss


def request_for(parts: Parts, proxy: proxies.Proxy, epsilon: float, seed: int,
                overrides: dict[str, Any], capped: dict[str, Any] | str | None) -> JobCreate:
    """The job's request: the defaults (with ``overrides``) and the capped-regime rule
    (``app.jobs.recipe.capped_regime``, as ``plan`` applies it); ``capped`` "off" plans
    without the rule (full-batch defaults everywhere), a dict (exploration) replaces the rule's
    settings where the rule would apply."""
    training_body: dict[str, Any] = {"seed": seed, **overrides}
    body = {"dataset_id": 1, "privacy": {"target_epsilon": epsilon}, "training": training_body}
    request = JobCreate.model_validate(body)
    n_train = len(parts.y[identity.Part.TRAIN])
    delta = job_service.plan(dataset=dataset_for(proxy, parts), request=request).delta
    if capped == "off" or not recipe.full_batch_capped(target_epsilon=epsilon, delta=delta):
        return request
    if capped is None:
        return request.model_copy(update={"training": recipe.capped_regime(
            request.training, target_epsilon=epsilon, delta=delta, n_train=n_train,
            n_calibration=len(parts.y[identity.Part.CALIBRATION]),
            inputs=encoder_for(proxy.schema).n_inputs)})
    assert isinstance(capped, dict)
    extra = dict(capped)
    fraction, most = extra.pop("batch_fraction", None), extra.pop("batch_max", 65536)
    if fraction is not None:
        extra["batch_size"] = int(min(most, max(8, round(fraction * n_train))))
    body["training"] = {**training_body, **extra}
    return JobCreate.model_validate(body)


def ours(proxy: proxies.Proxy, parts: Parts, request: JobCreate, noise_seed: int,
         cell: Cell, kept: dict[str, np.ndarray] | None = None) -> Scores | None:
    """Plan, train, calibrate as the worker does; None (and the reason kept) when refused.
    ``kept``: filled with the evaluation part's released probabilities."""
    T, C, E = identity.Part  # noqa: N806
    try:
        job = job_service.plan(dataset=dataset_for(proxy, parts), request=request)
    except InvalidRequest as refused:
        cell.refused = str(refused)
        return None
    encoder, spec = encoder_for(proxy.schema), spec_of(job)
    cell.plans.add(f"{spec.optimizer} b{'=n' if spec.sample_rate >= 1 else spec.batch_size} "
                   f"e{job.epochs}")
    cell.clips.append(job.max_grad_norm)
    with seeded_noise(noise_seed):
        result = training.train(parts.x[T], parts.y[T], spec, device=torch.device("cpu"),
                                encoder=encoder)
    history = [Mechanism(*step) for step in result.history]
    noise = held_out_noise(history, [spec.delta],
                           lambda delta: training.epsilon_of(result.history, delta)[0])
    calibration = calibrate_if_meaningful(
        result.network, parts.x[C], parts.y[C], history=history, delta=spec.delta,
        training_epsilon=training.epsilon_of(result.history, spec.delta)[0],
        noise_multiplier=noise, encoder=encoder, rng=np.random.default_rng(noise_seed))
    cell.withheld += calibration.method == CALIBRATION_WITHHELD
    cell.coarse += calibration.method == COARSE_METHOD
    probabilities = training.predict_proba(result.network, parts.x[E], encoder)
    if kept is not None:
        kept["probabilities"] = probabilities
    return peers.scores(parts.y[E], probabilities)


def run_table(spec: str, splits: int, epsilons: tuple[float, ...], overrides: dict[str, Any],
              capped: dict[str, Any] | str | None) -> tuple[proxies.Proxy, dict[float, Cell]]:
    T, _, E = identity.Part  # noqa: N806
    cells = {eps: Cell() for eps in epsilons}
    proxy = proxies.make(spec)
    for seed in range(splits):
        table = proxy if proxy.real else proxies.make(spec, generator_seed=seed)
        encoder = encoder_for(table.schema)
        parts = split(table, seed)
        x_train, x_eval, y_train, y_eval = (encoder.encode(parts.x[T]), encoder.encode(parts.x[E]),
                                            parts.y[T], parts.y[E])
        coef, bias = baselines.non_private_fit(x_train, y_train)
        non_private = peers.scores(y_eval, baselines.sigmoid(x_eval @ coef + bias))
        base = peers.scores(y_eval, np.full(len(y_eval), peers.base_rate(y_train)))
        for eps, cell in cells.items():
            request = request_for(parts, table, eps, seed, overrides, capped)
            figures = ours(table, parts, request, seed, cell)
            if figures is None:
                continue
            delta = job_service.plan(dataset=dataset_for(table, parts), request=request).delta
            if seed == 0 and len(table.y) >= SPREAD_ROWS:  # one job, fresh noise each time
                cell.repeats = [figures.log_loss] + [
                    ours(table, parts, request, 10_000 + r, Cell()).log_loss  # type: ignore
                    for r in range(1, REPEATS)]
            coef_dp, bias_dp = baselines.diffprivlib_fit(
                x_train, y_train, epsilon=eps,
                data_norm=baselines.public_row_norm(encoder.n_players), seed=seed)
            coef_op, bias_op = peers.opacus_user_fit(x_train, y_train, epsilon=eps, delta=delta,
                                                     seed=seed)
            ebm = peers.dp_ebm_fit(table.schema, parts.x[T], y_train, epsilon=eps, delta=delta)
            ebm_family = peers.dp_ebm_family_fit(table.schema, parts.x[T], y_train,
                                                 epsilon=eps, delta=delta)
            dp_rate = peers.dp_base_rate(y_train, epsilon=eps, delta=delta,
                                         rng=np.random.default_rng(seed))
            for method, scored in (
                    ("ours", figures), ("non_private", non_private), ("base", base),
                    ("diffprivlib", peers.scores(y_eval, baselines.sigmoid(x_eval @ coef_dp
                                                                           + bias_dp))),
                    ("opacus", peers.scores(y_eval, baselines.sigmoid(x_eval @ coef_op
                                                                      + bias_op))),
                    ("dp_ebm", peers.scores(y_eval, ebm(parts.x[E]))),
                    ("dp_ebm_family", peers.scores(y_eval, ebm_family(parts.x[E]))),
                    ("base_dp", peers.scores(y_eval, np.full(len(y_eval), dp_rate)))):
                cell.scores[method].append(scored)
    return proxy, cells


def header(proxy: proxies.Proxy, splits: int) -> str:
    enc = encoder_for(proxy.schema)
    return (f"{len(proxy.y):,} rows, {enc.n_players} features ({enc.n_inputs} inputs), "
            f"prevalence {proxy.y.mean():.1%}, {splits} splits"
            f"{' (real public table)' if proxy.real else ''}: {proxy.note}")


def _without_rule(training: TrainingConfig, **_: Any) -> TrainingConfig:
    """The capped-regime rule switched off (``--capped off``): the request's training as is."""
    return training


_RARE = np.array([0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32])
_RARE_LOGITS = np.log(_RARE / (1 - _RARE))
V2_EDGES = np.sort(np.concatenate([[-12.0, -10.0, -8.0], _RARE_LOGITS, [0.0], -_RARE_LOGITS,
                                   [8.0, 10.0, 12.0]]))
"""dp-platt-binned-v2's 24 bins (``--fit clamped``)."""


def _clamped_fit(counts: np.ndarray, positives: np.ndarray, *, noise_std: float,
                 edges: np.ndarray, prior: calibration.Prior) -> tuple[float, float]:
    """``--fit clamped``: the fit before the deconvolved one (v2's: bins under the noise floor
    left out, positives clamped, the slope's prior N(1, 0.1), the coarse release's N(1, 0.3))."""
    return platt_fit.fit_clamped(
        counts, positives, logits=calibration.bin_logits(edges),
        min_count=calibration.NOISE_FLOOR * noise_std,
        prior_mean=(1.0, calibration.PRIOR_INTERCEPT),
        prior_sd=(0.3 if edges is calibration.COARSE_EDGES else 0.1,
                  calibration.PRIOR_INTERCEPT_SD))


def main(argv: list[str] | None = None) -> dict[str, tuple[int, dict[float, Cell]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="proxy")
    parser.add_argument("--tables", help="comma-separated tables instead of a set: real ones "
                        f"({', '.join(proxies.REAL)}) or built ones (name or name@rows)")
    parser.add_argument("--splits", "--seeds", type=int, default=SPLITS)
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--training", default="{}",
                        help="JSON overrides of the request's training block (exploration)")
    parser.add_argument("--calibration", choices=["v3", "v2"], default="v3",
                        help="v2: the fine release from the size floor up (no coarse "
                        "release)")
    parser.add_argument("--capped", help="off: without the capped-regime rule (full batch "
                        "everywhere); or JSON settings replacing the rule's (exploration; "
                        "batch_fraction and batch_max scale the batch to n)")
    parser.add_argument("--delta", choices=["default", "max"], default="default",
                        help="max: each table's budget at delta 1/(10 n_rows)")
    parser.add_argument("--fit", choices=["deconvolved", "clamped"], default="deconvolved",
                        help="clamped: the calibration before v3 (dp-platt-binned-v2's 24 bins, "
                        "the noisy counts clamped, bins under the noise floor left out, the "
                        "slope's sd 0.1)")
    args = parser.parse_args(argv)
    if args.fit == "clamped":
        calibration.fit_platt = _clamped_fit  # type: ignore[assignment]
        calibration.EDGES = V2_EDGES
    BUDGET_DELTA["rule"] = args.delta
    names = args.tables.split(",") if args.tables else SETS[args.set]
    epsilons = tuple(float(e) for e in args.epsilons.split(","))
    overrides = json.loads(args.training)
    capped = args.capped if args.capped in (None, "off") else json.loads(args.capped)
    if capped == "off":  # ``plan`` applies the rule itself: off there too
        recipe.capped_regime = _without_rule  # type: ignore[assignment]
    if args.calibration == "v2":  # the fine release from the floor up, never the coarse one
        calibration.COARSE_BELOW = 1.0
    torch.set_num_threads(1)  # tiny models: more threads only contend (7x slower on 2 cores)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started, results = time.perf_counter(), {}
    print(f"Recipe: the request's defaults{f' with {overrides}' if overrides else ''}"
          f"{f'; capped regime: {capped}' if capped else ''}; calibration {args.calibration}; "
          "delta: the service's default")
    for name in names:
        proxy, cells = run_table(name, args.splits, epsilons, overrides, capped)
        results[name] = (len(proxy.y), cells)
        print_table(name, header(proxy, args.splits), cells, len(proxy.y))
    print_summary(args.tables or f"{args.set} set", results)
    print(f"\n{time.perf_counter() - started:.0f} s")
    return results


if __name__ == "__main__":
    main()
