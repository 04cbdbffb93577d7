"""Where the DP calibration starts to help: its log-loss against none, around the size floor.

``app.jobs.size_floor`` withholds the calibration release when the calibration part is below
``calibration_floor`` at the job's noise (the rarer outcome, at most half the rows, summed over
the release's logit bins, at least 2 noise stds). This bench computes the floor for the fine
release's bins (``len(EDGES) + 1``); the worker computes it for ``FLOOR_BINS``
(``worker.calibration.size_floor_rows``), about 1.4 times as many rows. It checks that the floor
sits where the release stops hurting. A model's logits are drawn as DP-SGD leaves them: the true
log-odds (normal, sd 1.5, centred for the prevalence) times 0.9, shifted by -1 (clipping
under-weights the positives). For each prevalence, epsilon (full batch, delta 1e-5: noise
multiplier ``size_floor.gaussian_noise``) and multiple of the floor,
``worker.calibration.calibrate`` (the worker's mechanism and fit) runs on that many calibration
rows; the log-loss on 20,000 fresh rows is compared with the uncalibrated model's. Synthetic
rows only (public by construction).

Printed per cell: the mean log-loss after calibration over before (below 1: it helps), and the
share of runs where it helped.

    .venv/bin/python bench/calibration_floor.py [--runs 200]
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.jobs import size_floor  # noqa: E402
from worker.calibration import EDGES, calibrate  # noqa: E402

PREVALENCE_CENTRES = {"5%": -3.8, "26%": -1.3, "50%": 0.0}
MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0)
EPSILONS = (1.0, 3.0)
DELTA = 1e-5


def _draw(n: int, centre: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(the model's logits, outcomes) for n rows."""
    truth = rng.normal(centre, 1.5, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-truth))).astype(float)
    return 0.9 * truth - 1.0, y


def _log_loss(logits: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0.0, logits) - y * logits))


def cell(rows: int, noise: float, centre: float, runs: int,
         rng: np.random.Generator) -> tuple[float, float]:
    """(mean log-loss after / before, share of runs it helped) at ``rows`` calibration rows."""
    ratios, helped = [], 0
    for _ in range(runs):
        logits, y = _draw(rows, centre, rng)
        fitted = calibrate(logits, y, noise, rng)
        fresh, fresh_y = _draw(20_000, centre, rng)
        before = _log_loss(fresh, fresh_y)
        after = _log_loss(fitted.slope * fresh + fitted.intercept, fresh_y)
        ratios.append(after / before)
        helped += after < before
    return float(np.mean(ratios)), helped / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(20_260_128)
    bins = len(EDGES) + 1
    header = "  ".join(f"{m:>4g}x floor " for m in MULTIPLES)
    print(f"calibrated / uncalibrated log-loss (share of runs it helped); {args.runs} runs")
    for epsilon in EPSILONS:
        noise = size_floor.gaussian_noise(epsilon, DELTA)
        floor = size_floor.calibration_floor(noise_multiplier=noise, bins=bins)
        print(f"\nepsilon {epsilon:g}: noise multiplier {noise:.3f}, floor {floor} rows")
        print(f"{'prevalence':>10}  {header}")
        for name, centre in PREVALENCE_CENTRES.items():
            cells = [cell(max(2, math.ceil(m * floor)), noise, centre, args.runs, rng)
                     for m in MULTIPLES]
            print(f"{name:>10}  " + "  ".join(f"{r:.3f} ({h:4.0%})" for r, h in cells))


if __name__ == "__main__":
    main()
