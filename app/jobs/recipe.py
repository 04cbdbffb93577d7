"""The default recipe's rules that depend on the dataset: public quantities in, settings out.

The defaults were first chosen on the crisis generator (6 features, 2% outcome). On tables of
other shapes (bench/proxy_study.py: two real public tables and three built ones, 4 to 30
features, 1% to 37% outcomes, 569 to 200,000 rows) three of them did not carry over, and are
now rules on public quantities only: the row count, the declared schema, the privacy request
and the noisy gradients themselves (post-processing). Never on a statistic of the rows (not
even the prevalence), nor on the loss.

Optimizer. Momentum SGD at lr 0.5 did not converge on the 200,000-row, 30-feature, 1% table:
its lab values use a sixth of their declared range and the outcome is rare, so the logistic
loss is nearly flat in most directions (curvature about 1e-2 / 36) and 500 steps moved the
weights a fraction of the way: AUC 0.048 below non-private at epsilon 3 and 8, with little
noise (0.027 with 1000 steps). Adam divides each coordinate's step by the root mean square of
its noisy gradient (post-processing, no privacy cost; ``worker.optimizer``), which removes the
scale of the features and of the outcome: AUC gap 0.0021 at epsilon 3 and 0.0004 at 8,
log-loss 0.3% and 0.1% above non-private. Its epsilon is 5 standard deviations of the
gradient noise (``worker.optimizer.ADAM_NOISE_EPSILON``; the noise std sigma C / (q n) is
public): a coordinate whose gradient is within the noise steps like momentum SGD at about
lr / (6 noise stds), instead of taking a full-size step of noise. Against 3 and 10 noise stds
(lr 0.3, 1000 steps), AUC gaps on the 1% table: 0.0143 at epsilon 1 (3: 0.0164, 10: 0.0163;
1: 0.0227, over the goal), 0.0021 at epsilon 3 (0.0015, 0.0030), 0.042 at epsilon 0.5 (0.031,
0.068); the 15% table at 0.5: 0.0097 (0.0077, 0.0137). On the crisis generator's 5,600-row
tables at epsilon 1 (bench/utility.py's data, 150 runs of fresh noise each, AUC on 200,000
fresh rows) the noise sets the spread: mean 0.8294 and 5% of runs below 0.82 (3: 0.8269 and
13%; 10: 0.8301 and 3%; momentum SGD, 500 steps: 0.8258 and 17%). Beta2 0.99 against torch's
0.999 (at 3 noise stds): 0.0015 against 0.0025 at epsilon 3 on the 1% table (a shorter memory
lets the first steps' large gradients go). On fair, crisis and mixed Adam holds SGD's AUC gaps
within 0.002 at epsilon 1 to 8 and at 0.5 within 0.006.

Learning rate (``default_learning_rate``). Adam's is in parameter units per step: 0.3 for the
logistic model. At 5 noise stds against 0.2: 0.042 against 0.061 at epsilon 0.5 on the 1%
table, 0.8294 against 0.8304 on the crisis generator at epsilon 1; at 3 noise stds against
0.15 and 0.5: 0.016 against 0.015 and 0.021 (over the goal) at epsilon 1 on the 1% table. The
mlp's tanh layer does not take 0.3: 0.1 (the 2% proxy at epsilon 8, 2 seeds: AUC gap 0.008
against 0.019; momentum SGD 0.008). SGD keeps its 0.5.

Full-batch steps. At q = 1, T steps at noise sigma are exactly one Gaussian release at sigma /
sqrt(T): more steps cost no utility, only time, up to the noise cap. The default is now 1000
(``app.jobs.schemas.FULL_BATCH_EPOCHS``): at 3 noise stds on the 1% table 0.0070 -> 0.0015 at
epsilon 3 and 0.0039 -> 0.0002 at 8; the other proxies move by less than 0.002, but for the 2%
proxy at epsilon 1 (0.0041 -> 0.0005).

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

Epochs. At the noise cap (MAX_NOISE_MULTIPLIER) the default 1000 full-batch steps cannot reach
epsilon below 1.2 (500: 0.82; delta 1e-5); 202 steps reach 0.4997. When a request leaves the
epochs to the default and its target is out of reach, the plan takes the most epochs that reach
it (``app.privacy.noise.epochs_for_target``) instead of refusing; the job shows the epochs used.
"""

import math

from app.datasets.crisis_schema import CRISIS_SCHEMA
from app.datasets.dataset_schema import DatasetSchema
from app.datasets.encoding import encoder_for
from app.datasets.models import Dataset
from app.families import create_family

LEGACY_OPTIMIZER = "sgd"
"""The optimizer of a job stored before requests named one: the default then."""
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


def default_learning_rate(optimizer: str, model: str) -> float:
    """The learning rate of a request that leaves it to the default: the family's own (its
    ``learning_rates``; the figures above are the logistic model's and the MLP's)."""
    return create_family(model).default_learning_rate(optimizer)


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
