"""Shapley values of a patient's features against the public reference patient.

Each declared feature is one player: its model inputs (one, or a categorical feature's one-hot
block) enter or leave a coalition together. The baseline is the schema's public reference
patient, never a statistic of the private data.

- Up to ``MAX_EXACT_PLAYERS`` players: exact, over all 2^d coalitions in batched forward passes
  (d = 6 gives 64 evaluations per patient). Additivity holds exactly: base + sum(phi) = f(x).
- Beyond: the log-odds of a logistic model are linear in its inputs, so their Shapley values
  have the closed form w_block . (x_block - reference_block), exact for any d. Otherwise (the
  probability scale, or an MLP) the estimate is the mean of the marginal contributions over
  ``PERMUTATIONS`` fixed, public random orders (antithetic pairs; Strumbelj and Kononenko 2014;
  Mitchell et al. 2022). Each order's marginals add up to f(x) - f(reference) exactly, so the
  estimate keeps exact additivity; its standard error is reported.
- An additive model (log-odds = intercept + one term per player, e.g. DP-EBM) gives its
  ``terms``: a player's Shapley value on the log-odds is then its term minus the reference's,
  exactly, for any d (every coalition adds the same difference).
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import factorial

import numpy as np

MAX_EXACT_PLAYERS = 12
PERMUTATIONS = 128  # 64 antithetic pairs
MAX_BLOCK_VALUES = 4_000_000  # float32 inputs per forward pass: 16 MB


@lru_cache(maxsize=16)
def _coalitions(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks (2^d, d) and the weight matrix W (2^d, d) with phi = v @ W."""
    masks = ((np.arange(2**d)[:, None] >> np.arange(d)[None, :]) & 1).astype(bool)
    sizes = masks.sum(axis=1)

    def w(s: np.ndarray) -> np.ndarray:
        return np.array([factorial(k) * factorial(d - k - 1) / factorial(d) for k in s])

    with_i = w(np.maximum(sizes - 1, 0))[:, None]  # weight of v(S) where i is in S
    without_i = w(np.minimum(sizes, d - 1))[:, None]  # weight of v(S) where i is not in S
    weights = np.where(masks, with_i, -without_i)
    return masks, weights


Model = Callable[[np.ndarray], np.ndarray]
"""Encoded inputs (m, inputs), in the dtype of the rows explained -> log-odds (m,)."""

Terms = Callable[[np.ndarray], np.ndarray]
"""Encoded inputs (m, inputs) -> each player's additive log-odds term (m, d), float64."""


@dataclass(frozen=True)
class Explanation:
    """Shapley values (n, d) on the log-odds and probability scales, with their bases."""

    phi: np.ndarray
    phi_p: np.ndarray
    base: float  # the reference patient's log-odds
    full: np.ndarray  # each patient's log-odds (n,)
    method: str  # "exact" | "closed-form+sampled" | "sampled"
    standard_error: float  # largest standard error of any value (0 when exact)

    @property
    def base_p(self) -> float:
        return float(sigmoid(np.array(self.base)))

    @property
    def p(self) -> np.ndarray:
        return sigmoid(self.full)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def shapley_from_values(values: np.ndarray) -> np.ndarray:
    """Shapley values (n, d) from coalition values (n, 2^d)."""
    d = int(np.log2(values.shape[1]))
    _, weights = _coalitions(d)
    return values @ weights


def coalition_values(model: Model, x: np.ndarray, reference: np.ndarray,
                     players: np.ndarray) -> np.ndarray:
    """Log-odds of every coalition of every row, (n, 2^d), in blocks of bounded memory.

    Args:
        x: encoded rows (n, inputs); reference: the encoded reference (inputs,).
        players: for each input, the index of its player.
    """
    d = int(players.max()) + 1
    masks, _ = _coalitions(d)
    inputs = masks[:, players]  # (2^d, inputs): which inputs each coalition takes from x
    n, width = x.shape
    per_block = max(1, MAX_BLOCK_VALUES // (2**d * width))
    out = np.empty((n, 2**d))
    for start in range(0, n, per_block):
        rows = x[start:start + per_block]
        stacked = np.where(inputs[None], rows[:, None, :], reference.astype(x.dtype))
        flat = np.ascontiguousarray(stacked.reshape(-1, width))  # the same kernel every time
        out[start:start + len(rows)] = model(flat).reshape(len(rows), -1)
    return out


def _orders(d: int) -> np.ndarray:
    """``PERMUTATIONS`` public player orders: fixed pseudo-random ones and their reverses."""
    rng = np.random.default_rng(20141001 + d)
    half = np.array([rng.permutation(d) for _ in range(PERMUTATIONS // 2)])
    return np.concatenate([half, half[:, ::-1]])


def sampled_values(model: Model, x: np.ndarray, reference: np.ndarray,
                   players: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Permutation estimates: (phi (n, d), phi_p (n, d), max standard error per row (n,))."""
    d = int(players.max()) + 1
    orders = _orders(d)
    n, width = x.shape
    phi = np.zeros((n, d))
    phi_p = np.zeros((n, d))
    square = np.zeros((n, d))
    for order in orders:
        # Prefix coalitions of this order: 0, {o1}, {o1, o2}, ... (d + 1 evaluations per row).
        taken = np.zeros((d + 1, d), dtype=bool)
        for k, player in enumerate(order):
            taken[k + 1:, player] = True
        inputs = taken[:, players]
        stacked = np.where(inputs[None], x[:, None, :], reference.astype(x.dtype))
        values = model(np.ascontiguousarray(stacked.reshape(-1, width))).reshape(n, d + 1)
        marginal = np.diff(values, axis=1)  # step k adds order[k]
        marginal_p = np.diff(sigmoid(values), axis=1)
        phi[:, order] += marginal
        phi_p[:, order] += marginal_p
        square[:, order] += marginal_p**2
    m = len(orders)
    phi, phi_p = phi / m, phi_p / m
    variance = np.maximum(square / m - phi_p**2, 0.0) / m
    return phi, phi_p, np.sqrt(variance).max(axis=1)


def _term_differences(terms: Terms, x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """An additive model's log-odds Shapley values: each term minus the reference's."""
    return terms(x) - terms(reference[None, :].astype(x.dtype))


def explain(model: Model, x: np.ndarray, reference: np.ndarray, players: np.ndarray, *,
            linear_weights: np.ndarray | None = None, terms: Terms | None = None
            ) -> Explanation:
    """Shapley values of every row of ``x`` (encoded) against ``reference``.

    Args:
        linear_weights: the input weights when the log-odds are linear in the inputs (a
            logistic model): their Shapley values then have a closed form.
        terms: an additive model's per-player terms: the log-odds values are read from them
            (the probability-scale ones still come from the coalitions or the orders).
    """
    d = int(players.max()) + 1
    if d <= MAX_EXACT_PLAYERS:
        values = coalition_values(model, x, reference, players)
        phi = (shapley_from_values(values) if terms is None
               else _term_differences(terms, x, reference))
        return Explanation(phi, shapley_from_values(sigmoid(values)),
                           float(values[0, 0]), values[:, -1], "exact", 0.0)
    base = float(model(reference[None, :].astype(x.dtype))[0])
    phi, phi_p, error = sampled_values(model, x, reference, players)
    full = model(x).astype(np.float64)
    method = "sampled"
    if linear_weights is not None:
        per_input = (x - reference) * linear_weights
        phi = np.zeros((len(x), d))
        np.add.at(phi.T, players, per_input.T)
        method = "closed-form+sampled"
    if terms is not None:
        phi = _term_differences(terms, x, reference)
        method = "closed-form+sampled"
    return Explanation(phi, phi_p, base, full, method,
                       float(error.max()) if len(error) else 0.0)


def coalition_inputs(x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Every coalition of every row, one input per player: (n * 2^d, d), the empty one first."""
    masks, _ = _coalitions(x.shape[1])
    return np.where(masks[None, :, :], x[:, None, :], reference[None, None, :]).reshape(
        -1, x.shape[1])


def exact_shapley(
    f: Model, x: np.ndarray, reference: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phi (n, d), base (n,), full (n,)) of ``f`` with one player per column of ``x``."""
    values = coalition_values(f, x, reference, np.arange(x.shape[1]))
    return shapley_from_values(values), values[:, 0], values[:, -1]
