"""The seed article's synthetic crisis generator: seeded, reproducible, any size.

Outcome model (the article's): logit = -6 + 0.12 phq9 - 0.03 gaf + 0.15 sessions
+ 1.0 substance_use + 1.8 prior_crisis. Feature draws were chosen so the prevalence is about
2% and the Bayes-optimal ROC-AUC (scoring with the true probabilities) is about 0.845.
"""

from dataclasses import dataclass

import numpy as np

from app.features import FEATURE_NAMES

INTERCEPT = -6.0
COEFFICIENTS = {
    "age": 0.0,
    "phq9": 0.12,
    "gaf": -0.03,
    "num_sessions": 0.15,
    "substance_use": 1.0,
    "prior_crisis": 1.8,
}


@dataclass(frozen=True)
class SyntheticTable:
    x: np.ndarray  # (n, n_features) raw values in spec order
    y: np.ndarray  # (n,) 0/1 crisis within 30 days
    p: np.ndarray  # (n,) true probability (only a generator knows it)


def true_logit(x: np.ndarray) -> np.ndarray:
    beta = np.array([COEFFICIENTS[name] for name in FEATURE_NAMES])
    return INTERCEPT + x @ beta


def generate(n_rows: int, seed: int) -> SyntheticTable:
    """Draw ``n_rows`` patients; the same (n_rows, seed) always gives the same table."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 81, n_rows)
    phq9 = rng.integers(0, 28, n_rows)
    gaf = np.clip(np.rint(rng.normal(60.0, 15.0, n_rows)), 1, 100)
    sessions = np.clip(rng.poisson(5.0, n_rows), 0, 50)
    substance = rng.binomial(1, 0.3, n_rows)
    prior = rng.binomial(1, 0.2, n_rows)
    x = np.column_stack([age, phq9, gaf, sessions, substance, prior]).astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-true_logit(x)))
    y = rng.binomial(1, p).astype(np.float64)
    return SyntheticTable(x=x, y=y, p=p)


def split_indices(n_rows: int, seed: int, train_fraction: float = 0.7) -> tuple[np.ndarray, ...]:
    """(training rows, held-out rows): each record is a training row with probability
    ``train_fraction``, by its own coin, independently of the others and of the data.

    Per-record coins (rather than a fixed-size permutation) make the two parts a
    data-independent partition *record by record*: adding or removing one patient moves no
    other patient between the parts. That is what lets the held-out calibration and the
    training compose in parallel (``worker/calibration.py``). The coins come from the dataset's
    seed, so the split is reproducible.
    """
    coins = np.random.default_rng([seed, 2]).random(n_rows)
    in_train = coins < train_fraction
    return np.flatnonzero(in_train), np.flatnonzero(~in_train)


def training_row_count(n_rows: int, seed: int, train_fraction: float = 0.7) -> int:
    """How many of the rows the coins put in training (a function of size and seed only)."""
    return int(len(split_indices(n_rows, seed, train_fraction)[0]))
