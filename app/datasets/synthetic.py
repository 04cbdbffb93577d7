"""The seed article's synthetic crisis generator: seeded, reproducible, any size.

Outcome model (the article's): logit = -6 + 0.12 phq9 - 0.03 gaf + 0.15 sessions
+ 1.0 substance_use + 1.8 prior_crisis. Feature draws were chosen so the prevalence is about
2% and the Bayes-optimal ROC-AUC (scoring with the true probabilities) is about 0.845.

Each record also carries ``sex`` (female/male, half each), a subgroup attribute for the
evaluation's fairness tables. It is not a model feature and has no effect on the outcome; it is
drawn from its own stream, so every other column (and the Bayes ceiling) is as before.
A record's id is its index in the generated table.

``SHIFTS`` names the generator's documented variants (a synthetic source's ``shift``). For
follow-up cohorts (monitoring), under ``"phq9_and_outcome"`` the PHQ-9 scores move up
(drawn from 8 to 27 instead of 0 to 27: a service now seeing more severe depression) and the
outcome model changes (PHQ-9 and prior crises matter less, substance use more:
``SHIFTED_COEFFICIENTS``, intercept raised to -5.3; the prevalence falls to about 0.7%), so a
model trained on the unshifted generator ranks worse on it (measured on 120,000 rows of seed 41:
the old model's true logit ranks at ROC-AUC 0.70, the shifted one's at 0.77). Every other
column is drawn as before.

``"subgroup_effect"`` (selected the same way, but a property of a cohort rather than a change
over time) is the documented subgroup effect for fairness checks: for patients aged
65 and over (the last age band, ``AGE_BANDS``) the outcome follows low functioning and falling
away from care instead of depression, substance use and history (``OLDER_COEFFICIENTS``: GAF
-0.10 instead of -0.03, sessions -0.15 instead of +0.15, PHQ-9, substance use and prior crises
0; ``OLDER_INTERCEPT`` keeps their prevalence near 2%). Every column but the outcome is drawn
as before, and the other bands' outcome model is the article's. A model trained on everyone
learns mostly the younger patients' weights, so it ranks the 65-80 band clearly worse than the
others (exact ROC-AUC 0.73 against 0.82 to 0.84 with a non-private logistic fit on 100,000
rows, although the band's own true probabilities rank it at 0.85, as the other bands' at 0.84
to 0.85); its calibration-in-the-large per band stays within 0.002
(tests/datasets/test_subgroup_effect.py).
``bench/fairness_budget.py`` shows how the evaluation's noisy gaps see it at each epsilon.
"""

import hashlib
from dataclasses import dataclass

import numpy as np

from app.datasets import record_coins
from app.datasets.patients import identity
from app.datasets.schema.built_in_schema import SEX_CATEGORIES
from app.features import BY_NAME, FEATURE_NAMES

INTERCEPT = -6.0
COEFFICIENTS = {
    "age": 0.0,
    "phq9": 0.12,
    "gaf": -0.03,
    "num_sessions": 0.15,
    "substance_use": 1.0,
    "prior_crisis": 1.8,
}


PHQ9_AND_OUTCOME = "phq9_and_outcome"
SUBGROUP_EFFECT = "subgroup_effect"
SHIFTS = (PHQ9_AND_OUTCOME, SUBGROUP_EFFECT)
SHIFTED_INTERCEPT = -5.3
SHIFTED_COEFFICIENTS = {**COEFFICIENTS, "phq9": 0.02, "prior_crisis": 0.4, "substance_use": 1.6}
OLDER_FROM_AGE = 65
"""Under ``SUBGROUP_EFFECT``, patients this old or older (the last of ``AGE_BANDS``) follow
``OLDER_COEFFICIENTS``."""
OLDER_INTERCEPT = 1.9
OLDER_COEFFICIENTS = {**COEFFICIENTS, "phq9": 0.0, "gaf": -0.10, "num_sessions": -0.15,
                      "substance_use": 0.0, "prior_crisis": 0.0}


@dataclass(frozen=True)
class SyntheticTable:
    x: np.ndarray  # (n, n_features) raw values in spec order
    y: np.ndarray  # (n,) 0/1 crisis within 30 days
    p: np.ndarray  # (n,) true probability (only a generator knows it)
    sex: np.ndarray  # (n,) subgroup attribute: index into SEX_CATEGORIES


def _linear(x: np.ndarray, intercept: float, weights: dict[str, float]) -> np.ndarray:
    return intercept + x @ np.array([weights[name] for name in FEATURE_NAMES])


def true_logit(x: np.ndarray, shift: str | None = None) -> np.ndarray:
    """The outcome model's log-odds of raw rows ``x`` under ``shift`` (None: the article's)."""
    if shift == PHQ9_AND_OUTCOME:
        return _linear(x, SHIFTED_INTERCEPT, SHIFTED_COEFFICIENTS)
    logit = _linear(x, INTERCEPT, COEFFICIENTS)
    if shift == SUBGROUP_EFFECT:
        older = x[:, FEATURE_NAMES.index("age")] >= OLDER_FROM_AGE
        logit = np.where(older, _linear(x, OLDER_INTERCEPT, OLDER_COEFFICIENTS), logit)
    return logit


def generate(n_rows: int, seed: int, shift: str | None = None) -> SyntheticTable:
    """Draw ``n_rows`` patients; the same (n_rows, seed, shift) always gives the same table."""
    if shift is not None and shift not in SHIFTS:
        raise ValueError(f"unknown shift {shift!r}; known: {SHIFTS}")
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 81, n_rows)
    phq9 = rng.integers(8 if shift == PHQ9_AND_OUTCOME else 0, 28, n_rows)
    gaf = np.clip(np.rint(rng.normal(60.0, 15.0, n_rows)), 1, 100)
    sessions = np.clip(rng.poisson(5.0, n_rows), 0, 50)
    substance = rng.binomial(1, 0.3, n_rows)
    prior = rng.binomial(1, 0.2, n_rows)
    x = np.column_stack([age, phq9, gaf, sessions, substance, prior]).astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-true_logit(x, shift)))
    y = rng.binomial(1, p).astype(np.float64)
    sex = np.random.default_rng([seed, 3]).integers(0, len(SEX_CATEGORIES), n_rows)
    return SyntheticTable(x=x, y=y, p=p, sex=sex.astype(np.int64))


def split_indices(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, held-out rows) of a generated table for public-proxy experiments (benches,
    tests): the parts' keyed PRF under a secret derived from ``seed``, so it is reproducible.
    The service never uses this: a registered dataset's secret is random and kept server-side.
    It keeps the v1 coins, so the figures of tests and benches built on it do not move.
    """
    secret = hashlib.sha256(f"public-proxy:{seed}".encode()).hexdigest()
    parts = identity.parts_of(range(n_rows), secret, scheme=record_coins.BLAKE2B_V1)
    in_train = parts == identity.Part.TRAIN
    return np.flatnonzero(in_train), np.flatnonzero(~in_train)


_AGE = BY_NAME["age"]
AGE_BANDS = ((int(_AGE.lower), 29), (30, 44), (45, 64), (65, int(_AGE.upper)))
"""Inclusive age bands in years, ending at the public bounds of the age feature."""


def age_band_labels() -> list[str]:
    return [f"{low}-{high}" for low, high in AGE_BANDS]


def age_band_codes(age: np.ndarray) -> np.ndarray:
    """Each age's band (index into AGE_BANDS); ages are clipped to the public bounds."""
    starts = np.array([low for low, _ in AGE_BANDS[1:]], dtype=float)
    clipped = np.clip(age, _AGE.lower, _AGE.upper)
    return np.searchsorted(starts, clipped, side="right").astype(np.int64)


def subgroups(x: np.ndarray, sex: np.ndarray) -> dict[str, tuple[np.ndarray, list[str]]]:
    """The crisis schema's subgroups: age band and sex, with their public labels."""
    age = x[:, FEATURE_NAMES.index("age")]
    return {"age": (age_band_codes(age), age_band_labels()),
            "sex": (sex, list(SEX_CATEGORIES))}
