"""Held-out evaluation: the only statistics of the data that leave the trust boundary.

At ~2% prevalence a 2,400-row holdout has ~50 positives and an age band ~10, so every metric
comes with its counts, ranking metrics with bootstrap intervals, rates with Wilson intervals,
and a metric that would rest on too few rows is None with a note saying why. The output is
stored as JSON: only floats, ints, None, strings, lists and dicts, never NaN or inf.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np

from app.bands import BANDS, DEFAULT_BAND_THRESHOLDS, band_index, interval, validate_thresholds
from app.core.errors import InvalidRequest
from app.features import BY_NAME, FEATURE_NAMES, N_FEATURES
from worker.holdout_metrics import ece_equal_mass, ece_equal_width, ranking_metrics, wilson

N_BOOTSTRAP = 1000
CI_LEVEL = 0.95
ECE_BINS = 10
MIN_CLASS_ROWS = 5
"""Fewer positives (or negatives) than this: no bootstrap interval, no subgroup AUC. A
resample of 3 positives has only a handful of distinct orderings; its percentiles mean little."""
MIN_ROWS_ECE = 100
"""Fewer rows than this: no ECE (bins of under 10 rows)."""
DIGITS = 4
_AGE = BY_NAME["age"]
AGE_BANDS = ((int(_AGE.lower), 29), (30, 44), (45, 64), (65, int(_AGE.upper)))
"""Inclusive age bands in years, ending at the public bounds of the feature spec."""

DEFINITIONS = {
    "roc_auc": "Chance that a random positive row scores above a random negative one (ties "
    "count half); 0.5 is chance, 1 is perfect ranking.",
    "pr_auc": "Average precision (as sklearn): mean precision at each positive's score. A "
    "random ranker scores the prevalence, not 0.5.",
    "ci": "95% stratified percentile bootstrap: each resample draws the positives and the "
    "negatives with replacement separately, so both classes are present and the prevalence "
    f"is fixed. None with a note below {MIN_CLASS_ROWS} rows of either class (the whole "
    "holdout still reports its point estimates whenever both classes are present).",
    "brier": "Mean squared error of the probability; brier_baseline is the Brier score of "
    "predicting the holdout prevalence for every row (a model must beat it).",
    "ece": f"Expected calibration error: rows sorted by probability, cut into {ECE_BINS} "
    "equal-mass bins; the row-weighted mean of |mean predicted - observed rate|. It is "
    "biased upward in small samples (a perfectly calibrated model still shows ECE > 0). "
    f"ece_equal_width uses {ECE_BINS} bins of width 0.1 instead.",
    "reliability": "The equal-mass bins of ece: range and mean of the predicted probability, "
    "observed rate with a 95% Wilson interval, rows and positives.",
    "bands": "A row is high if p >= medium_high, medium if low_medium <= p < medium_high, low "
    "otherwise (as the risk endpoint). 'exactly': rows in this band; 'at_or_above': rows in "
    "this band or a higher one (those flagged if this band triggers action). precision (PPV) "
    "= positives / rows; recall (sensitivity) = positives / all positives; share_of_rows = "
    "rows / all rows. Intervals are 95% Wilson intervals; None when the denominator is 0.",
    "subgroups": "The same metrics within each age band (years, inclusive). roc_auc and "
    f"pr_auc are None below {MIN_CLASS_ROWS} rows of either class, ece below {MIN_ROWS_ECE} rows.",
}


def json_safe(value: Any) -> Any:
    """Round floats to DIGITS, turn NaN/inf into None, tuples into lists, numpy into Python."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return round(float(value), DIGITS) if np.isfinite(value) else None
    return value


def band_metrics(
    y: np.ndarray, probability: np.ndarray, thresholds: Mapping[str, float]
) -> dict[str, dict[str, Any]]:
    """Precision and recall per risk band, of 'exactly this band' and of 'this band or higher'.

    'At or above medium' answers the clinician's question "if I act on medium and high, how
    many of those I act on have a crisis (precision), and how many crises do I catch
    (recall)?"; 'exactly medium' says how the medium band on its own behaves.
    """
    rows, positives = len(y), int(y.sum())
    index = band_index(probability, thresholds)
    n_in = np.bincount(index, minlength=len(BANDS))
    k_in = np.bincount(index, weights=y, minlength=len(BANDS)).round().astype(np.int64)
    out = {}
    for b, band in enumerate(BANDS):
        views = {}
        for view, n, k in (
            ("exactly", int(n_in[b]), int(k_in[b])),
            ("at_or_above", int(n_in[b:].sum()), int(k_in[b:].sum())),
        ):
            views[view] = {
                "rows": n,
                "positives": k,
                "share_of_rows": n / rows if rows else None,
                "precision": k / n if n else None,
                "precision_ci": wilson(k, n),
                "recall": k / positives if positives else None,
                "recall_ci": wilson(k, positives),
            }
        p_from, p_to = interval(band, thresholds)
        out[band.value] = {"p_from": p_from, "p_to": p_to, **views}
    return out


def _core(
    y: np.ndarray,
    p: np.ndarray,
    thresholds: Mapping[str, float],
    *,
    rng: np.random.Generator,
    n_bootstrap: int,
    min_class_for_auc: int,
) -> tuple[dict[str, Any], list[str]]:
    """Metrics shared by the whole holdout and each subgroup, with notes on what is missing."""
    rows, positives = len(y), int(y.sum())
    negatives, notes = rows - positives, []
    fewest = min(positives, negatives)
    auc = ap = auc_ci = ap_ci = None
    if fewest >= min_class_for_auc and fewest > 0:
        boot = n_bootstrap if fewest >= MIN_CLASS_ROWS else 0
        auc, ap, auc_ci, ap_ci = ranking_metrics(y, p, n_bootstrap=boot, rng=rng, level=CI_LEVEL)
    if fewest == 0:
        notes.append(f"{positives} positives and {negatives} negatives: "
                     "ROC-AUC and PR-AUC need both classes")
    elif fewest < min_class_for_auc:
        notes.append(f"{positives} positives and {negatives} negatives: fewer than "
                     f"{min_class_for_auc} in a class, ROC-AUC and PR-AUC not reported "
                     "(unstable)")
    elif fewest < MIN_CLASS_ROWS:
        notes.append(f"{positives} positives and {negatives} negatives: fewer than "
                     f"{MIN_CLASS_ROWS} in a class, no confidence intervals")
    ece = ece_width = None
    if rows >= MIN_ROWS_ECE:
        ece, ece_width = ece_equal_mass(y, p, ECE_BINS)[0], ece_equal_width(y, p, ECE_BINS)
    else:
        notes.append(f"{rows} rows: fewer than {MIN_ROWS_ECE}, ECE not reported")
    prevalence = positives / rows if rows else None
    core = {
        "rows": rows,
        "positives": positives,
        "prevalence": prevalence,
        "roc_auc": auc,
        "roc_auc_ci": auc_ci,
        "pr_auc": ap,
        "pr_auc_ci": ap_ci,
        "brier": float(np.mean((p - y) ** 2)) if rows else None,
        "brier_baseline": prevalence * (1 - prevalence) if prevalence is not None else None,
        "ece": ece,
        "ece_equal_width": ece_width,
        "bands": band_metrics(y, p, thresholds),
    }
    return core, notes


def _check(
    y: np.ndarray, p: np.ndarray, x_raw: np.ndarray | None, thresholds: Mapping[str, float]
) -> None:
    if y.ndim != 1 or p.shape != y.shape:
        raise ValueError(f"y_true {y.shape} and probability {p.shape} must be equal 1-d shapes")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("y_true must hold only 0 and 1")
    if not (np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()):
        raise ValueError("probability must be finite and in [0, 1]")
    if x_raw is not None and x_raw.shape != (len(y), N_FEATURES):
        raise ValueError(f"x_raw must be ({len(y)}, {N_FEATURES}) in FEATURE_NAMES order")
    try:
        validate_thresholds(thresholds)
    except InvalidRequest as exc:  # the API's rule, raised here as the programming error it is
        raise ValueError("band thresholds need 0 < low_medium < medium_high < 1") from exc


def evaluate(
    y_true: np.ndarray,
    probability: np.ndarray,
    *,
    x_raw: np.ndarray | None = None,
    band_thresholds: Mapping[str, float] | None = None,
    rng_seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
) -> dict[str, Any]:
    """Everything a clinician needs to judge the model on held-out rows, JSON-ready.

    Args:
        y_true: (n,) 0/1 outcomes of the held-out rows.
        probability: (n,) predicted probabilities in [0, 1].
        x_raw: (n, N_FEATURES) raw held-out features in FEATURE_NAMES order; gives the age
            subgroups (None: no subgroups).
        band_thresholds: {"low_medium", "medium_high"}; ``app.bands`` defaults when None.
        rng_seed: bootstrap seed. Fixed is fine: it resamples held-out rows for an interval,
            it is not a privacy mechanism.
        n_bootstrap: resamples per interval (0: no intervals).

    Raises:
        ValueError: on mismatched shapes, labels other than 0/1, probabilities that are not
            finite or outside [0, 1], or thresholds out of order.
    """
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(probability, dtype=np.float64)
    x = None if x_raw is None else np.asarray(x_raw, dtype=np.float64)
    thresholds = dict(band_thresholds or DEFAULT_BAND_THRESHOLDS)
    _check(y, p, x, thresholds)
    rng = np.random.default_rng(rng_seed)
    core, notes = _core(y, p, thresholds, rng=rng, n_bootstrap=n_bootstrap, min_class_for_auc=1)
    reliability = ece_equal_mass(y, p, ECE_BINS)[1] if len(y) >= MIN_ROWS_ECE else []
    subgroups = None
    if x is None:
        notes.append("no held-out features given: no subgroups")
    else:
        subgroups = _age_subgroups(y, p, x[:, FEATURE_NAMES.index("age")], thresholds,
                                   rng=rng, n_bootstrap=n_bootstrap)
    return json_safe({
        "split": "holdout",
        **core,
        "ci_method": f"stratified percentile bootstrap, {n_bootstrap} resamples"
        if n_bootstrap > 0 else "none (n_bootstrap=0)",
        "ci_level": CI_LEVEL,
        "bootstrap_seed": rng_seed,
        "ece_method": f"equal-mass bins, {ECE_BINS} bins",
        "reliability": reliability,
        "band_thresholds": thresholds,
        "subgroups": subgroups,
        "notes": notes,
        "definitions": DEFINITIONS,
    })


def _age_subgroups(
    y: np.ndarray,
    p: np.ndarray,
    age: np.ndarray,
    thresholds: Mapping[str, float],
    *,
    rng: np.random.Generator,
    n_bootstrap: int,
) -> list[dict[str, Any]]:
    """Core metrics per age band; ages are clipped to the public bounds so bands cover all rows."""
    age = np.clip(age, _AGE.lower, _AGE.upper)
    groups = []
    for index, (lower, upper) in enumerate(AGE_BANDS):
        last = index == len(AGE_BANDS) - 1
        member = (age >= lower) & ((age <= upper) if last else (age < AGE_BANDS[index + 1][0]))
        core, notes = _core(y[member], p[member], thresholds, rng=rng, n_bootstrap=n_bootstrap,
                            min_class_for_auc=MIN_CLASS_ROWS)
        groups.append({"feature": "age", "group": f"{lower}-{upper}", "from": lower,
                       "to": upper, **core, "notes": notes})
    return groups
