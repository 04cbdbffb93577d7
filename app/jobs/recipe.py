"""The default recipe's rules that depend on the dataset: public quantities in, settings out.

The defaults were first chosen on the crisis generator (6 features, 2% outcome). On tables of
other shapes (bench/proxy_study.py: two real public tables and three built ones, 4 to 30
features, 1% to 37% outcomes, 569 to 200,000 rows) two of them did not carry over, and are now
rules on public quantities only: the row count, the declared schema and the privacy request.
Never on a statistic of the rows (not even the prevalence).

Clip norm C. A logistic model's per-record gradient is (p - y) (x, 1), whose norm reaches the
encoded row's norm when the model is confidently wrong. Clip 0.5 was chosen at a 2% outcome,
where it binds on the positives only and the calibration moves the intercept back; at a 32%
outcome it binds on most rows, the weights come out about twice the non-private ones and the
log-loss is 8% above non-private. A larger C removes that bias, but the noise grows with C: on
the mean gradient, Gaussian noise of std C * sigma / (q n) per step and input, so over the whole
run (T steps, sqrt(T) averaging) and all n_inputs + 1 parameters a norm of about
``C * NOISE_PER_CLIP`` with NOISE_PER_CLIP = sigma sqrt(n_inputs + 1) / (q n sqrt(T)) (for the
full-batch default, sigma / sqrt(T) is the single Gaussian the run amounts to). The rule holds
that noise norm at ``CLIP_NOISE_BUDGET`` and C within [CLIP_MIN, CLIP_MAX]: large tables get
the nearly unbiased C = 2, small or strongly private ones a C down to 0.1 that keeps the noise
down (the DP calibration then moves the intercept back, as it did for clip 0.5 at 2%).

Epochs. At the noise cap (MAX_NOISE_MULTIPLIER) the default 500 full-batch steps cannot reach
epsilon below 0.82 (delta 1e-5); 202 steps reach 0.4997. When a request leaves the epochs to
the default and its target is out of reach, the plan takes the most epochs that reach it
(``app.privacy.noise.epochs_for_target``) instead of refusing; the job shows the epochs used.
"""

import math

from app.datasets.dataset_schema import CRISIS_SCHEMA, DatasetSchema
from app.datasets.encoding import encoder_for
from app.datasets.models import Dataset

CLIP_MIN, CLIP_MAX = 0.1, 2.0
CLIP_NOISE_BUDGET = 0.0025
"""The noise norm on the run's mean gradient the default clip allows (in gradient units).
Measured on the proxies of bench/proxy_study.py at epsilon 0.5, 1 and 3: 0.0025 against 0.005
and 0.01 (the 6,366-row table at epsilon 1: log-loss 1.1% above non-private against 3.2% and
4.2%; the larger tables reach CLIP_MAX with all three), and a floor of 0.1 against 0.25 and
0.5 (the 569-row, 30-feature table at epsilon 1: AUC 0.003 below non-private against 0.008
and 0.025)."""


def n_inputs(dataset: Dataset) -> int:
    """The model's inputs under the dataset's declared schema (one-hot categories counted);
    a registration without a schema is the built-in generator's."""
    schema = (CRISIS_SCHEMA if dataset.schema_json is None
              else DatasetSchema.model_validate(dataset.schema_json))
    return encoder_for(schema).n_inputs


def noise_per_clip(
    *, noise_multiplier: float, sample_rate: float, steps: int, n_train: int, inputs: int
) -> float:
    """Norm of the noise on the run's mean gradient per unit of clip norm (see the module)."""
    return noise_multiplier * math.sqrt(inputs + 1) / (sample_rate * n_train * math.sqrt(steps))


def default_clip(
    *, noise_multiplier: float, sample_rate: float, steps: int, n_train: int, inputs: int
) -> float:
    """The clip norm C of a request that leaves it to the default, rounded to 2 digits.

    Args:
        noise_multiplier: the planned sigma (0: non-private, public data only).
        sample_rate: the Poisson rate q.
        steps: the planned steps T.
        n_train: the training rows (public: the row count is).
        inputs: the model's inputs under the declared schema.

    Returns:
        C in [CLIP_MIN, CLIP_MAX]: CLIP_NOISE_BUDGET over the noise per unit of C, clamped.
    """
    per_clip = noise_per_clip(noise_multiplier=noise_multiplier, sample_rate=sample_rate,
                              steps=steps, n_train=n_train, inputs=inputs)
    if per_clip <= 0.0:
        return CLIP_MAX
    return round(min(CLIP_MAX, max(CLIP_MIN, CLIP_NOISE_BUDGET / per_clip)), 2)
