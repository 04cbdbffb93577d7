"""The default recipe's rules that depend on the dataset: public quantities in, settings out.

Every rule reads public quantities only: the row count, the declared schema, the privacy request
and the noisy gradients themselves (post-processing). Never a statistic of the rows (not even
the prevalence), nor the loss. The rules were chosen on bench/proxy_study.py's proxy set (built
tables of 6 to 37 inputs and 1% to 40% outcomes) and checked on its confirmation set of real
public tables; docs/decisions/0013-default-recipe-rules.md records why.

Optimizer. Adam divides each coordinate's step by the root mean square of its noisy gradient
(post-processing, no privacy cost; ``worker.optimizer``), which removes the scale of the
features and of the outcome: where inputs use a small part of their declared range and the
outcome is rare, the logistic loss is nearly flat in most directions and momentum SGD moves the
weights a fraction of the way. Its epsilon is 5 standard deviations of the gradient noise
(``worker.optimizer.ADAM_NOISE_EPSILON``; the noise std sigma C / (q n) is public): a
coordinate whose gradient is within the noise steps like momentum SGD at about
lr / (6 noise stds), instead of taking a full-size step of noise. Its beta2 is 0.99: a shorter
memory than torch's 0.999 lets the first steps' large gradients go.

Learning rate (``default_learning_rate``). Adam's is in parameter units per step: 0.3 for the
logistic model, 0.1 for the mlp, whose tanh layer does not take 0.3. SGD keeps its 0.5.

Full-batch steps. At q = 1, T steps at noise sigma are exactly one Gaussian release at sigma /
sqrt(T): more steps cost no utility, only time, up to the noise cap. The default is 1000
(``app.jobs.schemas.FULL_BATCH_EPOCHS``).

Clip norm C. A logistic model's per-record gradient is (p - y) (x, 1), whose norm reaches the
encoded row's norm when the model is confidently wrong. A small clip binds on the positives
only at a rare outcome, where the calibration moves the intercept back; at a common outcome it
binds on most rows and the weights come out biased. A larger C removes that bias, but the noise
grows with C: on the mean gradient, Gaussian noise of std C * sigma / (q n) per step and input,
so over the whole run (T steps, sqrt(T) averaging) and all n_inputs + 1 parameters a norm of
about ``C * NOISE_PER_CLIP`` with NOISE_PER_CLIP = sigma sqrt(n_inputs + 1) / (q n sqrt(T))
(for the full-batch default, sigma / sqrt(T) is the single Gaussian the run amounts to). The
rule holds that noise norm at ``CLIP_NOISE_BUDGET`` and C within [CLIP_MIN, CLIP_MAX]: large
tables get the nearly unbiased C = 2, small or strongly private ones a C down to 0.1 that keeps
the noise down (the DP calibration then moves the intercept back).

Epochs. At the noise cap (MAX_NOISE_MULTIPLIER) the default 1000 full-batch steps cannot reach
epsilon below 1.2 (500: 0.82; delta 1e-5); 202 steps reach 0.4997. When a request leaves the
epochs to the default and its target is out of reach, the plan takes the most epochs that reach
it (``app.privacy.noise.epochs_for_target``) instead of refusing; the job shows the epochs used.

The capped regime (``capped_regime``). Below that epsilon the full-batch plan cuts its steps at
the noise cap, and Adam's noise-normalised steps random-walk the weights of inputs that carry
no signal. Where, in addition, the calibration part is below SMALL_CALIBRATION_FACTOR times the
fine calibration's size floor (``small_calibration``: the DP calibration cannot correct the
scale of the logits well there), or the model has MANY_INPUTS inputs or more (the logit's share
of that wandering grows with the number of inputs), a request that leaves the batch and the
epochs to the defaults gets Opacus' tutorial recipe: Poisson batches of 256 rows (all the
training rows when fewer, so no table is refused), 20 epochs, plain SGD at lr 0.5 without
momentum, clip 1, the last iterate; the DP calibration follows as for every job. It is the same
algorithm as that peer, and its raw probabilities are what set it apart on small tables;
elsewhere the full-batch default ranks better, so it applies only where the calibration cannot
fix the full-batch model's scale or the inputs are many.

Where no calibration can be released (``calibration_cannot_release``). Whatever the delta, a
calibration part below the fine calibration's size floor at the target gets the same
mini-batch recipe: nothing would correct a full-batch model's over-confident logits there (its
own probabilities would stand), and the mini-batch recipe's are not over-confident and are
calibrated from half the floor (``worker.calibration.MINI_BATCH_FLOOR_SHARE``). The capped
regime alone read delta through the noise cap: at a large delta (2e-4) 1,000 full-batch steps
reach epsilon 1, and a table of a few hundred rows kept full-batch Adam with its calibration
withheld.
"""

import math

from app.datasets.models import Dataset
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import encoder_for
from app.families import create_family
from app.jobs import size_floor
from app.jobs.schemas import FULL_BATCH_EPOCHS, TrainingConfig
from app.privacy.accounting import MAX_NOISE_MULTIPLIER, Mechanism, gaussian_epsilon

LEGACY_OPTIMIZER = "sgd"
"""The optimizer of a job stored before requests named one: the default then."""
CLIP_MIN, CLIP_MAX = 0.1, 2.0
CLIP_NOISE_BUDGET = 0.0025
"""The noise norm on the run's mean gradient the default clip allows (in gradient units),
chosen with CLIP_MIN on the proxies of bench/proxy_study.py at epsilon 0.5, 1 and 3: a larger
budget biased the weights of middling tables less than it added noise, a larger floor cost the
small many-input table its AUC."""


def n_inputs(dataset: Dataset) -> int:
    """The model's inputs under the dataset's declared schema (one-hot categories counted);
    a registration without a schema is the built-in generator's."""
    schema = (BUILT_IN_SCHEMA if dataset.schema_json is None
              else DatasetSchema.model_validate(dataset.schema_json))
    return encoder_for(schema).n_inputs


def default_learning_rate(optimizer: str, model: str) -> float:
    """The learning rate of a request that leaves it to the default: the family's own (its
    ``learning_rates``; the module names the logistic model's and the MLP's)."""
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


CAPPED_BATCH = 256
"""The capped regime's expected batch, or the whole training part when it is smaller."""
CAPPED_EPOCHS = 20
CAPPED_OPTIMIZER, CAPPED_LEARNING_RATE, CAPPED_MOMENTUM = "sgd", 0.5, 0.0
CAPPED_CLIP, CAPPED_TAIL_AVERAGE = 1.0, 0.0
CALIBRATION_BINS = 24
"""The bins the DP calibration's size floor is computed for (``worker.calibration.FLOOR_BINS``:
24, twice the fine release's 12, so the floor stays where it was chosen)."""
SMALL_CALIBRATION_FACTOR = 5.0
"""Below this many times its size floor a calibration part cannot correct the capped
full-batch model's logits well enough: the capped regime's mini-batch recipe applies there
(about 3,500 rows in all at epsilon 1 and 6,500 at 0.5 for a 15% part). Above it the
full-batch default ranks better (bench/utility.py's 8,000-row tables). No table of the
confirmation set lies between 2 and 5 times the floor, so the bound rests on the proxy set."""
MANY_INPUTS = 16
"""From this many model inputs the capped regime's mini-batch recipe applies at any row count
(bench/proxy_study.py: the 14-input proxies lose by it, the 37-input one gains; see the
module)."""


def full_batch_capped(*, target_epsilon: float | None, delta: float) -> bool:
    """Whether the full-batch default (FULL_BATCH_EPOCHS steps at q = 1) needs more noise than
    MAX_NOISE_MULTIPLIER to reach ``target_epsilon`` (a public function of the request: at
    q = 1 the run is one Gaussian; delta 1e-5: below epsilon 1.2). None (a noise-multiplier
    job): False."""
    if target_epsilon is None:
        return False
    run = Mechanism(MAX_NOISE_MULTIPLIER, 1.0, FULL_BATCH_EPOCHS)
    return gaussian_epsilon([run], delta) > target_epsilon


def small_calibration(*, target_epsilon: float, delta: float, n_calibration: int) -> bool:
    """Whether the calibration part is below SMALL_CALIBRATION_FACTOR times its size floor at
    the held-out noise a full-batch plan at the target has (one Gaussian at (epsilon, delta):
    the training it matches is one), so the DP calibration cannot correct the scale of the
    model's logits well enough (about 3,500 rows at epsilon 1 and 6,500 at 0.5 for a 15%
    part)."""
    noise = size_floor.gaussian_noise(target_epsilon, delta)
    floor = size_floor.calibration_floor(noise_multiplier=noise, bins=CALIBRATION_BINS)
    return n_calibration < SMALL_CALIBRATION_FACTOR * floor


def capped_batch_size(n_train: int) -> int:
    """The capped regime's expected batch: CAPPED_BATCH, or all ``n_train`` rows when fewer
    (a 256-row batch would be refused on a smaller table)."""
    return min(n_train, CAPPED_BATCH)


def calibration_cannot_release(*, target_epsilon: float, delta: float,
                               n_calibration: int) -> bool:
    """Whether the calibration part is below the fine calibration's size floor itself at the
    target's held-out noise: no DP calibration would be released, so nothing could correct
    a full-batch model's over-confident logits (its own probabilities would stand)."""
    noise = size_floor.gaussian_noise(target_epsilon, delta)
    return n_calibration < size_floor.calibration_floor(noise_multiplier=noise,
                                                        bins=CALIBRATION_BINS)


def capped_regime_applies(*, target_epsilon: float | None, delta: float, n_calibration: int,
                          inputs: int) -> bool:
    """Whether the mini-batch recipe ranks or calibrates better than full-batch Adam: at any
    delta where the calibration part cannot be released at all
    (``calibration_cannot_release``: the full-batch model's scale would stand uncorrected);
    and where the full batch is capped (``full_batch_capped``), for a small calibration part
    (``small_calibration``) or MANY_INPUTS inputs or more (Adam's noise-normalised steps
    random-walk every weight that the noise hides, and the logit noise that adds up grows with
    the inputs: see the module)."""
    if target_epsilon is None:
        return False
    if calibration_cannot_release(target_epsilon=target_epsilon, delta=delta,
                                  n_calibration=n_calibration):
        return True
    if not full_batch_capped(target_epsilon=target_epsilon, delta=delta):
        return False
    return inputs >= MANY_INPUTS or small_calibration(
        target_epsilon=target_epsilon, delta=delta, n_calibration=n_calibration)


def capped_regime(training: TrainingConfig, *, target_epsilon: float | None, delta: float,
                  n_train: int, n_calibration: int, inputs: int) -> TrainingConfig:
    """``training`` with the capped regime's recipe (see the module) where the request left
    the batch and the epochs to the defaults, the full-batch plan would hit the noise cap and
    the mini-batch recipe wins there (``capped_regime_applies``); else unchanged.

    Only settings the request did not set are filled (the optimizer's learning rate and
    momentum only with the optimizer), from public quantities: the target, delta, the parts'
    row counts and the schema's inputs. Applied twice, it changes nothing more.
    """
    given = training.model_fields_set
    if ("batch_size" in given or "epochs" in given
            or not capped_regime_applies(target_epsilon=target_epsilon, delta=delta,
                                         n_calibration=n_calibration, inputs=inputs)):
        return training
    update: dict[str, object] = {"batch_size": capped_batch_size(n_train),
                                 "epochs": CAPPED_EPOCHS}
    if "optimizer" not in given:
        update["optimizer"] = CAPPED_OPTIMIZER
        if "learning_rate" not in given:
            update["learning_rate"] = CAPPED_LEARNING_RATE
        if "momentum" not in given:
            update["momentum"] = CAPPED_MOMENTUM
    if "max_grad_norm" not in given:
        update["max_grad_norm"] = CAPPED_CLIP
    if "tail_average" not in given:
        update["tail_average"] = CAPPED_TAIL_AVERAGE
    return training.model_copy(update=update)
