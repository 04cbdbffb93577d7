"""The fewest rows a job can use: a public rule on public quantities.

Without it a 2-row upload could train a model on 1 row with no calibration rows, and its
statement would say its probabilities "were calibrated on a held-out part". The rule below
refuses such jobs and makes a model say which held-out release it could not make meaningful. Its
inputs are public only: the part sizes (public by convention, ``app.datasets.patients.identity``),
the request's epsilon and delta (or, for a noise-multiplier job, the planned mechanism's PLD
epsilon), the model's inputs under the declared schema, and the held-out releases' noise
multipliers and public bins (functions of the planned mechanism). Never a statistic of the rows,
not even the prevalence: so every floor holds for the most favourable prevalence (50%), and is a
necessary condition, not a sufficient one, for a rarer outcome.

Held-out floor (``held_out_floor``). A held-out release (the calibration's per-bin counts, the
evaluation's histogram) is meaningful only if the rarer outcome's count, summed over the
release's ``cells`` public bins, can stand ``NOISE_FACTOR`` noise standard deviations above
zero, and holds at least ``MIN_CLASS_ROWS`` rows. The rarer outcome is at most half the part,
so the part needs

    rows >= max(2 MIN_CLASS_ROWS, 2 NOISE_FACTOR noise_std sqrt(cells)).

This is the evaluation's own rule (``worker.evaluation``: a ranking metric is reported only
when each class's noisy count reaches max(MIN_CLASS_ROWS, NOISE_FLOOR noise_std sqrt(bins)))
read at 50% prevalence: below it no prevalence can make the ROC-AUC reportable. For the
calibration (24 public logit bins, noise std sigma sqrt 2: 104 rows at epsilon 1, 39 at 3) it
is also where the DP Platt fit stops hurting (``bench/calibration_floor.py``, 200 runs per
cell): at half the floor its log-loss on fresh rows was 8-38% worse than no calibration at 5%,
26% and 50% prevalence; at the floor 1.6-5.5% better at 26% and 50% (helping in 68-80% of runs);
a rare outcome needs more (at 5%, still 1.5% worse at four times the floor at epsilon 1), which
a floor blind to the prevalence cannot see. At no noise the floor is 2 MIN_CLASS_ROWS = 10
rows: with fewer, not even exact counts hold five rows of each outcome.

Training floor (``training_floor``): the larger of

- ``ROWS_PER_PARAMETER`` (10) rows per model parameter (the logistic model's inputs and its
  intercept). The clinical-prediction rule of thumb asks for 10 outcome *events* per parameter
  (Peduzzi et al. 1996; Riley et al. 2019 show it is often too few); a row is at most one
  event, so 10 rows per parameter is necessary at any prevalence. It lets the 569-row,
  30-input public table of ``bench/proxy_study.py`` train (about 400 training rows against
  310), whose AUC came within 0.003 of non-private at epsilon 1.
- ``GRADIENT_SNR`` s(epsilon, delta) sqrt(inputs + 1) rows, s being the noise multiplier of one
  Gaussian mechanism with exactly (epsilon, delta) (Balle and Wang 2018). Full-batch DP-SGD at
  (epsilon, delta) is exactly that Gaussian on the summed clipped gradients (T steps at sigma
  compose to sigma / sqrt T), the least noise per unit of signal any plan has: at a Poisson
  rate q < 1 the run's mean gradient carries noise sigma / (q sqrt T), which the subsampled
  Gaussian's central limit (Dong, Roth and Su 2019) makes equal to s at large sigma and larger
  below (sigma 1.5, q 0.185, 6 steps: 3.31 against s = 2.07; sigma 5, q 0.05, 2,000 steps:
  2.24 against 2.20, both by the PLD accountant at delta 1e-5). That noise
  has norm about C s sqrt(inputs + 1) / n_train on a mean gradient whose norm is at most the
  clip norm C: below this floor the whole run's noise is larger than any signal its clipped
  gradients can carry, whatever the recipe.

A job is refused (422, before the ledger is touched) when its training part is below the
training floor at its epsilon, or a held-out part is below the held-out floor at no noise (no
epsilon could make it meaningful). So a job needs at least 10 (inputs + 1) + 20 >= 40 rows:
a 2-row or a 30-row table never trains. Above that, a held-out part below its floor at the
job's own noise does not stop the job: the calibration is then not released (the model's own
probabilities stand, uncalibrated) and the evaluation is released but flagged, and the model's
statement, card and dashboard say so (``shortfall_message``). A noisy mini-batch model's
calibration, fitted under a tight identity prior that a swamped release barely moves, is
released from half the calibration floor (``worker.calibration.MINI_BATCH_FLOOR_SHARE``).
"""

import math

from scipy.optimize import brentq

from app.core.errors import InvalidRequest
from app.datasets.models import Dataset
from app.privacy.accounting import Mechanism, gaussian_epsilon
from app.privacy.figures import epsilon_text

MIN_CLASS_ROWS = 5
"""Rows of each outcome a held-out release needs (``worker.evaluation.MIN_CLASS_ROWS``)."""
NOISE_FACTOR = 2.0
"""Noise stds a summed count must reach (``worker.evaluation.NOISE_FLOOR``, and the
calibration's per-bin ``worker.calibration.NOISE_FLOOR``)."""
ROWS_PER_PARAMETER = 10
GRADIENT_SNR = 1.0
HELD_OUT_MIN_ROWS = 2 * MIN_CLASS_ROWS
"""The held-out floor at no noise: what each held-out part needs for any job."""
CALIBRATION_WITHHELD = "none: not released (calibration part below its size floor)"
"""The calibration record's method when the calibration part is below its floor."""
_S_LOW, _S_HIGH = 1e-4, 1e6
TARGET_FIELD, NOISE_FIELD = "privacy.target_epsilon", "privacy.noise_multiplier"


class DatasetTooSmall(InvalidRequest):
    kind, title = "dataset-too-small", "Too few rows for this job"


def gaussian_noise(epsilon: float, delta: float) -> float:
    """The noise multiplier (noise std over L2 sensitivity) of one Gaussian mechanism that is
    exactly (epsilon, delta)-DP; 0 for an infinite epsilon (non-private, public data)."""
    if math.isinf(epsilon):
        return 0.0

    def excess(sigma: float) -> float:
        return gaussian_epsilon([Mechanism(sigma, 1.0, 1)], delta) - epsilon

    if excess(_S_HIGH) > 0:
        return _S_HIGH
    if excess(_S_LOW) < 0:
        return _S_LOW
    return float(brentq(excess, _S_LOW, _S_HIGH, xtol=1e-9, rtol=1e-9))


def statistical_floor(inputs: int) -> int:
    """Training rows any job needs, at any epsilon: ``ROWS_PER_PARAMETER`` per parameter."""
    return ROWS_PER_PARAMETER * (inputs + 1)


def noise_floor(*, epsilon: float, delta: float, inputs: int) -> int:
    """Training rows below which the least noisy plan at (epsilon, delta) drowns any signal."""
    return math.ceil(GRADIENT_SNR * gaussian_noise(epsilon, delta) * math.sqrt(inputs + 1))


def training_floor(*, epsilon: float, delta: float, inputs: int) -> int:
    """The fewest training rows a job at (``epsilon``, ``delta``) can use (see the module).

    Args:
        epsilon: the requested target (or a noise-multiplier job's planned PLD epsilon);
            ``math.inf`` for a non-private job on a public dataset.
        delta: the job's delta.
        inputs: the model's inputs under the declared schema (one-hot categories counted).

    Returns:
        Rows; non-increasing in epsilon and in delta, increasing in inputs.
    """
    return max(statistical_floor(inputs), noise_floor(epsilon=epsilon, delta=delta,
                                                       inputs=inputs))


def held_out_floor(*, noise_std: float, cells: int) -> int:
    """The fewest rows for a meaningful held-out release (see the module).

    Args:
        noise_std: the standard deviation of the noise on one released count (0: exact).
        cells: the release's public bins, each a noisy count of the rarer outcome.
    """
    return max(HELD_OUT_MIN_ROWS, math.ceil(2 * NOISE_FACTOR * noise_std * math.sqrt(cells)))


def calibration_floor(*, noise_multiplier: float, bins: int) -> int:
    """Calibration rows for a meaningful DP Platt release: per-bin counts of rows and of
    positives, L2 sensitivity sqrt 2 (``worker.calibration``)."""
    return held_out_floor(noise_std=noise_multiplier * math.sqrt(2.0), cells=bins)


def evaluation_floor(*, noise_std: float, bins: int) -> int:
    """Evaluation rows at which a ranking metric can be reported at the most favourable
    prevalence (``worker.evaluation``): ``noise_std`` per cell of its overall histogram."""
    return held_out_floor(noise_std=noise_std, cells=bins)


def upload_floor(inputs: int) -> int:
    """Rows below which a table can never train, whatever its parts and epsilon: the training
    floor at no noise and both held-out floors at no noise."""
    return statistical_floor(inputs) + 2 * HELD_OUT_MIN_ROWS


def check_upload(*, rows: int, inputs: int) -> None:
    """Refuse (422) a table too small for any job (its row count is public by convention).

    Raises:
        DatasetTooSmall: naming the rows and the minimum.
    """
    minimum = upload_floor(inputs)
    if rows < minimum:
        raise DatasetTooSmall(
            f"the table has {rows} rows; no job can train on fewer than {minimum} with this "
            f"schema ({inputs} model inputs: {statistical_floor(inputs)} training rows, 10 "
            f"per parameter, and {HELD_OUT_MIN_ROWS} rows in each held-out part); nothing "
            "was stored",
            field="body", rows=rows, minimum_rows=minimum,
        )


def check_held_out(dataset: Dataset) -> None:
    """Refuse (422) a dataset whose held-out parts are below their floor even without noise.

    Raises:
        DatasetTooSmall: naming the parts' rows and the minimum.
    """
    if min(dataset.n_calibration, dataset.n_evaluation) >= HELD_OUT_MIN_ROWS:
        return
    raise DatasetTooSmall(
        f"dataset {dataset.id} has {dataset.n_rows} rows: its calibration part has "
        f"{dataset.n_calibration} and its evaluation part {dataset.n_evaluation}, and each "
        f"needs at least {HELD_OUT_MIN_ROWS} ({MIN_CLASS_ROWS} of each outcome) for even an "
        "exact calibration or evaluation; no job can use it",
        field="dataset_id", rows=dataset.n_rows, calibration_rows=dataset.n_calibration,
        evaluation_rows=dataset.n_evaluation, minimum_rows=HELD_OUT_MIN_ROWS,
    )


def smallest_epsilon(*, training_rows: int, delta: float, inputs: int) -> float:
    """The smallest epsilon whose noise floor ``training_rows`` meets (math.inf: none)."""
    sigma = training_rows / (GRADIENT_SNR * math.sqrt(inputs + 1))
    return gaussian_epsilon([Mechanism(sigma, 1.0, 1)], delta) if sigma > 0 else math.inf


def check_training(*, dataset: Dataset, epsilon: float, delta: float, inputs: int,
                   field: str) -> None:
    """Refuse (422) a job whose training part is below its floor at this epsilon.

    Args:
        field: the request's privacy field the epsilon came from (``privacy.target_epsilon``,
            ``privacy.noise_multiplier``); named when a larger epsilon would pass.

    Raises:
        DatasetTooSmall: naming the field (or the dataset, when no epsilon would do), the
            training rows and the minimum at this epsilon.
    """
    minimum = training_floor(epsilon=epsilon, delta=delta, inputs=inputs)
    if dataset.n_train >= minimum:
        return
    base = statistical_floor(inputs)
    held = (f"dataset {dataset.id} has {dataset.n_rows} rows, {dataset.n_train} of them in "
            "its training part")
    if dataset.n_train < base:
        raise DatasetTooSmall(
            f"{held}; a job needs at least {base} training rows at any epsilon (10 per model "
            f"parameter: {inputs} inputs and an intercept)",
            field="dataset_id", rows=dataset.n_rows, training_rows=dataset.n_train,
            minimum_training_rows=base,
        )
    least = epsilon_text(smallest_epsilon(training_rows=dataset.n_train, delta=delta,
                                          inputs=inputs))
    detail = (f"{held}; at epsilon {epsilon_text(epsilon)} (delta {delta:g}) a job needs at "
              f"least {minimum}: with fewer, the whole run's gradient noise is larger than any "
              f"signal its clipped gradients can carry. This dataset allows epsilon {least} or "
              "more")
    if field != TARGET_FIELD:  # a noise multiplier: its planned epsilon is what falls short
        raise DatasetTooSmall(f"{detail} (a smaller noise multiplier)", field=field,
                              rows=dataset.n_rows, training_rows=dataset.n_train,
                              minimum_training_rows=minimum)
    raise DatasetTooSmall(detail, field=field, rows=dataset.n_rows,
                          training_rows=dataset.n_train, minimum_training_rows=minimum,
                          allowed=f"[{least}, 100]")


def shortfall_message(*, part: str, rows: int, minimum: int, epsilon: float) -> str:
    """The words a model carries for a held-out part below its floor at the job's noise."""
    at = ("even without noise" if math.isinf(epsilon)
          else f"at epsilon {epsilon_text(epsilon)}")
    if part == "calibration":
        return (f"Its probabilities were not calibrated on held-out data: the calibration part's "
                f"{rows} rows are below the {minimum} a meaningful DP calibration needs {at}, "
                "so none was released and the probabilities are the DP model's own.")
    return (f"Its held-out metrics are mostly noise: the evaluation part's {rows} rows are "
            f"below the {minimum} its DP release needs {at} for a ranking metric to be "
            "reported at any prevalence; read the metrics' notes.")


def check_job(*, dataset: Dataset, target_epsilon: float | None, delta: float,
              inputs: int) -> None:
    """A job's floors before it is planned: the held-out parts at no noise, and the training
    part at the target epsilon (at no noise for a noise-multiplier job, whose planned epsilon
    the planner checks once planned).

    Raises:
        DatasetTooSmall: naming the dataset's rows and the minimum.
    """
    check_held_out(dataset)
    check_training(
        dataset=dataset, epsilon=math.inf if target_epsilon is None else target_epsilon,
        delta=delta, inputs=inputs,
        field=NOISE_FIELD if target_epsilon is None else TARGET_FIELD)
