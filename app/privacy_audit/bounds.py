"""Epsilon lower bounds from one training run (Steinke, Nasr and Jagielski, NeurIPS 2023).

m canaries are each included in the training data with probability 1/2 (S_i uniform on
{-1, +1}). After training, the auditor ranks the canaries by a score computed from the output,
guesses "in" for the k+ highest, "out" for the k- lowest and abstains on the rest. If the
training is (epsilon, delta)-DP, the number W of correct guesses among the r = k+ + k- made
satisfies (the paper's Theorem 3.1 with its delta extension, its Appendix algorithm)

    P[W >= v] <= P[B >= v] + 2 m delta max_{i = 1..v} P[v - i <= B < v] / i,
    B ~ Binomial(r, e^eps / (1 + e^eps)).

An observed v whose right-hand side is at most beta rejects "(eps, delta)-DP" at confidence
1 - beta; the audited epsilon is the largest eps so rejected. Choosing (k+, k-) after seeing
the scores is a multiple test: every pair of a fixed grid is tested at beta / (grid size), so
by the union bound the best of them still holds with confidence 1 - beta.
"""

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import betaincinv, expit, gammaln
from scipy.stats import binom

GUESS_FRACTIONS: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5)
"""k+ and k- as fractions of m; fixed before any score is seen (the grid is public)."""
_EPS_GRID = 512  # resolution of the delta > 0 search, relative to the delta = 0 bound


def p_value(m: int, r: int, v: int, epsilon: float | np.ndarray, delta: float) -> np.ndarray:
    """P[at least ``v`` of ``r`` guesses correct] allowed by (epsilon, delta)-DP (vectorised).

    Args:
        m: canaries, each included independently with probability 1/2.
        r: guesses made (abstentions excluded), 0 <= r <= m.
        v: correct guesses, 0 <= v <= r.
        epsilon: one or more epsilons >= 0.
        delta: in [0, 1].
    """
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = expit(np.atleast_1d(np.asarray(epsilon, dtype=float)))[:, None]
    tail = binom.sf(v - 1, r, q)  # P[B >= v], shape (E, 1)
    if delta == 0 or v == 0:
        return np.minimum(tail[:, 0], 1.0)
    return np.minimum(tail[:, 0] + 2 * m * delta * _alpha(r, v, q), 1.0)


def _alpha(r: int, v: int, q: np.ndarray) -> np.ndarray:
    """max_{i=1..v} P[v - i <= B < v] / i per row of ``q``: cumulative sums of the pmf
    below v, read downwards from v - 1 (one pmf table instead of v tail evaluations)."""
    k = np.arange(v - 1, -1, -1, dtype=float)  # P[B = v - 1], P[B = v - 2], ...
    log_choose = gammaln(r + 1) - gammaln(k + 1) - gammaln(r - k + 1)
    below = np.exp(log_choose + k * np.log(q) + (r - k) * np.log1p(-q))
    return np.max(np.cumsum(below, axis=1) / np.arange(1, v + 1), axis=1)


def pure_lower_bound(r: int, v: int, beta: float) -> float:
    """The delta = 0 bound in closed form: P[B >= v] = I_q(v, r - v + 1) rises with q, so the
    largest rejected q solves I_q = beta (a Clopper-Pearson limit), and eps = logit(q)."""
    if v == 0:
        return 0.0
    q = float(betaincinv(v, r - v + 1, beta))
    return math.log(q / (1 - q)) if 0.5 < q < 1 else (math.inf if q >= 1 else 0.0)


def lower_bound(m: int, r: int, v: int, delta: float, beta: float) -> float:
    """Largest epsilon that ``v`` correct of ``r`` guesses reject at confidence 1 - ``beta``.

    With delta > 0 the p-value need not rise monotonically in epsilon, so the bound is the
    first grid point whose p-value exceeds beta, stepped back one: every smaller epsilon is
    rejected too, which keeps the bound valid (at most one grid step conservative).
    """
    pure = pure_lower_bound(r, v, beta)
    if delta == 0 or pure <= 0 or not math.isfinite(pure):
        return pure
    grid = np.linspace(0.0, pure, _EPS_GRID + 1)
    above = np.nonzero(p_value(m, r, v, grid, delta) > beta)[0]
    if len(above) == 0:
        return pure
    return float(grid[above[0] - 1]) if above[0] > 0 else 0.0


def guess_counts(m: int, fractions: Sequence[float] = GUESS_FRACTIONS) -> list[tuple[int, int]]:
    """The (k+, k-) grid: every pair of counts from ``fractions`` of m that makes a guess."""
    counts = sorted({int(round(f * m)) for f in fractions})
    return [(kp, km) for kp in counts for km in counts if 0 < kp + km <= m]


@dataclass(frozen=True)
class OneRunBound:
    """The best guess of the grid and the epsilon it proves (already union-bound corrected)."""

    epsilon: float
    canaries: int
    included: int
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    tests: int
    confidence: float
    delta: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def audit(
    scores: np.ndarray, included: np.ndarray, *, delta: float, confidence: float = 0.95,
    fractions: Sequence[float] = GUESS_FRACTIONS,
) -> OneRunBound:
    """Rank canaries by ``scores`` (higher: more likely included) and bound epsilon from below.

    Args:
        scores: (m,) one score per canary, computed from the training output only.
        included: (m,) booleans, the coin flips S_i = +1.
        delta: the delta of the claim being audited (the job's).
        confidence: 1 - beta, shared by the union bound over the guess grid.

    Returns:
        The grid's best bound (0 when no pair rejects anything).
    """
    scores, included = np.asarray(scores, dtype=float), np.asarray(included, dtype=bool)
    m = len(scores)
    if m == 0 or included.shape != scores.shape:
        raise ValueError("need one inclusion flag per canary score, and at least one canary")
    order = np.argsort(-scores, kind="stable")  # ties keep index order, independent of S
    ranked = included[order]
    in_prefix = np.concatenate([[0], np.cumsum(ranked)])  # included among the top k
    out_suffix = np.concatenate([[0], np.cumsum(~ranked[::-1])])  # excluded among the bottom k
    grid = guess_counts(m, fractions)
    beta = (1.0 - confidence) / len(grid)
    candidates = sorted(
        ((pure_lower_bound(kp + km, int(in_prefix[kp] + out_suffix[km]), beta), kp, km)
         for kp, km in grid),
        reverse=True,
    )
    best = (0.0, 0, 0, 0)
    for pure, kp, km in candidates:
        if pure <= best[0]:
            break  # the delta > 0 bound never exceeds the pure one: nothing left can win
        v = int(in_prefix[kp] + out_suffix[km])
        if best[0] > 0 and p_value(m, kp + km, v, best[0], delta)[0] > beta:
            continue  # not even the current best is rejected: this pair cannot beat it
        eps = lower_bound(m, kp + km, v, delta, beta)
        if eps > best[0]:
            best = (eps, kp, km, v)
    eps, kp, km, v = best
    return OneRunBound(
        epsilon=eps, canaries=m, included=int(included.sum()), k_plus=kp, k_minus=km,
        guesses=kp + km, correct=v, tests=len(grid), confidence=confidence, delta=delta,
    )
