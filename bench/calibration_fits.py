"""Fits of the DP calibration side by side, on the same trained models and the same noisy counts.

Why: the proxy study (``bench/proxy_study.py``) judges a whole job, where the training's noise
hides a change of the calibration's fit; this bench trains each cell's default job once per
split, then releases the calibration counts ``--draws`` times (fresh noise each, the worker's
own release, seeded: public tables only) and fits each candidate to its own release of the
same noise draws: v2 (dp-platt-binned-v2: 24 bins, the noisy counts clamped, bins within the
noise of zero left out, the slope's prior sd 0.1) and v3 (the service's: 12 bins, the
release's own likelihood, ``worker.platt_fit``), the 6-bin coarse release shared where the
size rule picks it. Per table and epsilon it prints the mean (worst) log-loss on the
evaluation part (exact), beside the uncalibrated model's, the base rate's and the oracle's
(Platt's map fitted on the evaluation rows themselves: what no release can beat), and the
share of splits whose part is released at all (below the floor the service releases nothing:
the raw figure is what a job gets there) or coarsely. Built proxies only by default (the
rule was chosen on them; ``--tables anes96,...`` runs the confirmation set's).

    .venv/bin/python bench/calibration_fits.py                     # about 3 minutes
    .venv/bin/python bench/calibration_fits.py --tables strong@2500 --epsilons 1 --priors 0.1/1
"""

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.datasets.patients import identity  # noqa: E402
from app.datasets.schema.encoding import encoder_for  # noqa: E402
from app.jobs import service as job_service  # noqa: E402
from app.privacy.accounting import Mechanism  # noqa: E402
from app.privacy.parallel import held_out_noise  # noqa: E402
from bench import peers, proxies  # noqa: E402
from bench.proxy_study import V2_EDGES, dataset_for, request_for, seeded_noise, split  # noqa: E402
from worker import calibration as cal  # noqa: E402
from worker import platt_fit, training  # noqa: E402
from worker.tasks import spec_of  # noqa: E402

Fit = Callable[[np.ndarray, np.ndarray, float, bool, bool], tuple[float, float]]
"""(noisy counts, noisy positives, noise std, coarse release, full-batch model) ->
(slope, intercept)."""


def v2_fit(counts: np.ndarray, positives: np.ndarray, std: float, coarse: bool,
           full_batch: bool) -> tuple[float, float]:
    """dp-platt-binned-v2 (and coarse-v1): the noisy counts clamped, bins under the noise floor
    left out, the fine release's slope sd 0.1 (the coarse one's 0.3)."""
    edges = cal.COARSE_EDGES if coarse else V2_EDGES
    return platt_fit.fit_clamped(
        counts, positives, logits=cal.bin_logits(edges), min_count=cal.NOISE_FLOOR * std,
        prior_mean=(cal.PRIOR_SLOPE, cal.PRIOR_INTERCEPT),
        prior_sd=(0.3 if coarse else 0.1, cal.PRIOR_INTERCEPT_SD))


def v3_fit(slope_sd: float = cal.PRIOR_SLOPE_SD, intercept_sd: float = cal.PRIOR_INTERCEPT_SD,
           full_batch_slope: float = cal.FULL_BATCH_PRIOR_SLOPE,
           edges: np.ndarray | None = None) -> Fit:
    """The release's own likelihood (the service's fit), with these prior sds, this prior
    slope for full-batch models and these fine edges."""
    def fit(counts: np.ndarray, positives: np.ndarray, std: float, coarse: bool,
            full_batch: bool) -> tuple[float, float]:
        return cal.fit_platt(
            counts, positives, noise_std=std,
            edges=cal.COARSE_EDGES if coarse else (cal.EDGES if edges is None else edges),
            prior=cal.Prior(full_batch_slope if full_batch else cal.PRIOR_SLOPE, slope_sd,
                            intercept_sd))
    return fit


CANDIDATES: dict[str, tuple[np.ndarray, Fit]] = {"v2": (V2_EDGES, v2_fit), "v3": (cal.EDGES,
                                                                               v3_fit())}
"""Each candidate: its fine release's edges and its fit (the coarse release is shared)."""


def oracle(logits: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Platt's map fitted on exact per-row data (no prior, no bins)."""
    from sklearn.linear_model import LogisticRegression
    model = LogisticRegression(C=1e6).fit(logits[:, None], y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def log_loss(y: np.ndarray, logits: np.ndarray, slope: float, intercept: float) -> float:
    return peers.scores(y, 1 / (1 + np.exp(-(slope * logits + intercept)))).log_loss


def trained(spec: str, seed: int, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       np.ndarray, float, float, bool]:
    """The default job's model on one split: (calibration logits and labels, evaluation
    logits and labels, held-out noise, training prevalence, whether full-batch)."""
    T, C, E = identity.Part  # noqa: N806
    base = proxies.make(spec)
    table = base if base.real else proxies.make(spec, generator_seed=seed)
    encoder, parts = encoder_for(table.schema), split(table, seed)
    request = request_for(parts, table, eps, seed, {}, None)
    job_spec = spec_of(job_service.plan(dataset=dataset_for(table, parts), request=request))
    with seeded_noise(seed):
        result = training.train(parts.x[T], parts.y[T], job_spec, device=torch.device("cpu"),
                                encoder=encoder)
    steps = result.history
    noise = held_out_noise([Mechanism(*step) for step in steps], [job_spec.delta],
                           lambda d: training.epsilon_of(steps, d)[0])
    return (training.predict_log_odds(result.network, parts.x[C], encoder), parts.y[C],
            training.predict_log_odds(result.network, parts.x[E], encoder), parts.y[E],
            noise, float(parts.y[T].mean()), job_spec.sample_rate >= 1.0)


def run(spec: str, splits: int, epsilons: tuple[float, ...], draws: int) -> None:
    rows: dict[float, dict[str, list[float]]] = {e: {} for e in epsilons}
    for seed, eps in itertools.product(range(splits), epsilons):
        lc, yc, le, ye, noise, prevalence, full_batch = trained(spec, seed, eps)
        floor = cal.size_floor_rows(noise)
        coarse = len(lc) < cal.COARSE_BELOW * floor
        got = rows[eps]
        best = oracle(le, ye)
        for key, value in (("raw", log_loss(ye, le, 1.0, 0.0)),
                           ("base", peers.scores(ye, np.full(len(ye), prevalence)).log_loss),
                           ("oracle", log_loss(ye, le, *best)), ("oracle slope", best[0]),
                           ("released", float(len(lc) >= floor)), ("coarse", float(coarse))):
            got.setdefault(key, []).append(value)
        for draw, (name, (edges, fit)) in itertools.product(range(draws), CANDIDATES.items()):
            counts, positives = cal.release_counts(
                lc, yc, noise, np.random.default_rng(1_000 * seed + draw),
                cal.COARSE_EDGES if coarse else edges)
            slope, intercept = fit(counts, positives, noise * cal.SENSITIVITY, coarse,
                                   full_batch)
            got.setdefault(name, []).append(log_loss(ye, le, slope, intercept))
            got.setdefault(name + " slope", []).append(slope)
    print(f"\n{spec}, {splits} splits x {draws} draws: log-loss mean (worst), slope mean, "
          "share of splits released / coarse")
    for eps, got in rows.items():
        figures = "  ".join(f"{k} {np.mean(v):.3f}" + (
            "" if "slope" in k or k in ("released", "coarse") else f" ({np.max(v):.3f})")
            for k, v in got.items())
        print(f"  epsilon {eps:g}: {figures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", default="crisis@20000,wide@30000,strong@1000,strong@2500,"
                        "mixed@800,mixed@3000")
    parser.add_argument("--epsilons", default="0.5,1,3,8")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--priors", default="", help="extra v3 candidates, comma-separated "
                        "slope_sd/intercept_sd/full-batch prior slope (e.g. 0.1/1/1,0.3/1/0.8)")
    parser.add_argument("--edges", default="", help="an extra v3 candidate on these fine "
                        "edges (comma-separated logits)")
    args = parser.parse_args()
    for triple in filter(None, args.priors.split(",")):
        slope_sd, intercept_sd, full_batch_slope = (float(v) for v in triple.split("/"))
        CANDIDATES[f"v3 {triple}"] = (cal.EDGES, v3_fit(slope_sd, intercept_sd,
                                                        full_batch_slope))
    if args.edges:
        edges = np.array([float(e) for e in args.edges.split(",")])
        CANDIDATES["v3 edges"] = (edges, v3_fit(edges=edges))
    torch.set_num_threads(1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    started = time.perf_counter()
    for spec in args.tables.split(","):
        run(spec, args.splits, tuple(float(e) for e in args.epsilons.split(",")), args.draws)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
