"""The headline epsilon against dp-accounting's PLD, and its cost against Opacus' PRV.

Goal (review of the reported epsilon): on DP-SGD settings (q in [1e-4, 1], sigma in [0.5, 20],
1..100,000 steps, delta in [1e-9, 1e-4]) the headline figure (registry key ``prv``) is never
under dp-accounting's PLD by more than 0.5% and never over it by more than 2% + 0.005.

Per grid point (seeded, log-uniform; plus the review's two cases) this prints the headline
(``accounting.PLDAccountant``), the reference (``dp_accounting.pld.PLDAccountant`` at
``--interval``, default its own default 1e-4, pessimistic), the former headline (Opacus' PRV
with eps_error 0.01 on the integer-order domain, RDP past 600,000 points), their ratios to the
reference, and the time of one cold evaluation of each, measured in the same run. The reference
is slow (seconds per point at large epsilon): ``--points`` sets the grid size.

Run: .venv/bin/python bench/accounting_accuracy.py [--points 40] [--seed 2026]
"""

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import dp_accounting
import numpy as np
from opacus.accountants import PRVAccountant as OpacusPRVAccountant
from opacus.accountants.analysis.prv import Domain

from app.privacy import accounting
from app.privacy.accounting import Mechanism

REVIEW_CASES = [(1 / 44, 4.0, 88, 1e-5), (0.001, 10.0, 10_000, 1e-5)]
OLD_MAX_POINTS = 600_000


class OldPRV(OpacusPRVAccountant):
    """The headline before this change: Opacus' PRV (eps_error 0.01), its domain sized from
    integer-order RDP, RDP past 600,000 points (``app.privacy.accounting`` at the review)."""

    def _get_domain(
        self, prvs: Sequence[Any], num_self_compositions: Sequence[int], eps_error: float,
        delta_error: float,
    ) -> Domain:
        total = sum(num_self_compositions)
        bound = max(
            accounting.integer_order_epsilon(self.history, delta_error / 4),
            *(accounting.integer_order_epsilon([(s, q, 1)], delta_error / (8 * total))
              for s, q, _ in self.history),
        )
        size = max(bound, eps_error) + 3
        mesh = eps_error / np.sqrt(total * np.log(12 / delta_error) / 2)
        if 2 * size / mesh > OLD_MAX_POINTS:
            raise ValueError("domain too large")
        return Domain.create_aligned(-size, size, mesh)


def old_headline(q: float, sigma: float, steps: int, delta: float) -> float:
    if q >= 1.0:
        return accounting.gaussian_epsilon([Mechanism(sigma, q, steps)], delta)
    acc = OldPRV()
    acc.history = [(sigma, q, steps)]
    try:
        return float(acc.get_epsilon(delta=delta, eps_error=0.01))
    except (ValueError, ArithmeticError):
        return accounting.RDPAccountant().epsilon([Mechanism(sigma, q, steps)], delta)


def reference(q: float, sigma: float, steps: int, delta: float, interval: float) -> float:
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    pld.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return float(pld.get_epsilon(delta))


def headline(q: float, sigma: float, steps: int, delta: float) -> float:
    return accounting.PLDAccountant().epsilon([Mechanism(sigma, q, steps)], delta)


def timed(fn: Callable[..., float], *args: Any) -> tuple[float, float]:
    accounting.clear_caches()
    start = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - start


def grid(points: int, seed: int) -> list[tuple[float, float, int, float]]:
    rng = np.random.default_rng(seed)
    drawn = [
        (float(10 ** rng.uniform(-4, 0)), float(10 ** rng.uniform(math.log10(0.5), math.log10(20))),
         int(round(10 ** rng.uniform(0, 5))), float(10 ** rng.uniform(-9, -4)))
        for _ in range(points)
    ]
    return REVIEW_CASES + drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40, help="random grid points")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--interval", type=float, default=1e-4, help="the reference's")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows, times_new, times_old = [], [], []
    print("| q | sigma | steps | delta | PLD ref | headline | ratio | old PRV | ratio | "
          "t headline | t old | t ref |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for q, sigma, steps, delta in grid(args.points, args.seed):
        new, t_new = timed(headline, q, sigma, steps, delta)
        old, t_old = timed(old_headline, q, sigma, steps, delta)
        ref, t_ref = timed(reference, q, sigma, steps, delta, args.interval)
        rows.append((q, sigma, steps, delta, ref, new, old))
        times_new.append(t_new)
        times_old.append(t_old)
        print(f"| {q:.3g} | {sigma:.3g} | {steps} | {delta:.2g} | {ref:.5g} | {new:.5g} | "
              f"{new / ref:.4f} | {old:.5g} | {old / ref:.4f} | {t_new * 1e3:.0f} ms | "
              f"{t_old * 1e3:.0f} ms | {t_ref:.2f} s |", flush=True)
    summarise(rows, times_new, times_old)


def summarise(rows: list[tuple[float, ...]], times_new: list[float],
              times_old: list[float]) -> None:
    """Worst over/under against the reference, the goal's verdict, and the timings."""
    for label, col in (("headline", 5), ("old PRV", 6)):
        ratios = [r[col] / r[4] for r in rows]
        high, low = rows[int(np.argmax(ratios))], rows[int(np.argmin(ratios))]
        share = [(r[col] - r[4]) / (0.02 * r[4] + 0.005) for r in rows]
        margin = rows[int(np.argmax(share))]
        passed = all(r[4] * 0.995 <= r[col] <= r[4] * 1.02 + 0.005 for r in rows)
        print(f"\n{label}: ratio to PLD min {min(ratios):.4f}, max {max(ratios):.4f}")
        print(f"  worst over (relative): {max(ratios) - 1:+.3%} at {_where(high)}")
        print(f"  most of the over allowance used: {max(share):.1%} ({margin[col] - margin[4]:+.4g}"
              f" of {0.02 * margin[4] + 0.005:.4g}) at {_where(margin)}")
        print(f"  worst under: {min(ratios) - 1:+.3%} at {_where(low)}")
        print(f"  goal (under <= 0.5%, over <= 2% + 0.005): {'PASS' if passed else 'FAIL'}")
    for label, times in (("headline", times_new), ("old PRV", times_old)):
        print(f"{label}: time per cold evaluation median {statistics.median(times) * 1e3:.0f} ms,"
              f" max {max(times) * 1e3:.0f} ms over {len(times)} points")


def _where(row: tuple[float, ...]) -> str:
    return f"q={row[0]:.3g} sigma={row[1]:.3g} steps={row[2]} delta={row[3]:.2g}"


if __name__ == "__main__":
    main()
