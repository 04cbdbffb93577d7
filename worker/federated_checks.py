"""What the coordinator checks of a site's answer before it averages or sums it.

A site is another clinic's service: its answer may be malformed or lie. The coordinator takes
nothing on its word that it can check. Its epsilon is computed here from the site's public
mechanism (noise multiplier, sample rate, steps) and must meet the plan the coordinator
declared (the rounds, local steps, batch and target epsilon every site runs); a self-reported
epsilon is never read. Weights must have the shapes of the global model the round sent, and an
evaluation must be a histogram release of the federation's bins. An answer that fails is
dropped from its round as a failure; the round goes on if enough sites remain.
"""

import functools
import json
import math
from collections import Counter
from typing import Any

import numpy as np

from app.federation.schemas import FederatedRecipe
from app.privacy import accounting
from worker.dp_histogram import all_edges, bin_edges
from worker.evaluation import DIGITS

EPSILON_TOLERANCE = 1e-3
"""The relative slack over the target a site's recomputed epsilon may show (the noise search's
own precision); more is a mechanism that misses the plan."""
BINS_ROUNDING = 10.0 ** -DIGITS
"""How far a released bin edge may be from its threshold's (releases round figures to DIGITS)."""


class Unacceptable(ValueError):
    """A site's answer the coordinator cannot take: malformed, or off the declared plan."""


@functools.lru_cache(maxsize=256)
def _epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    history = [accounting.Mechanism(noise_multiplier, sample_rate, steps)]
    return accounting.epsilon_by_accountant(history, delta)["prv"]


def _number(metrics: dict[str, Any], name: str) -> float:
    value = metrics.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Unacceptable(f"{name} is not a finite number: {value!r}")
    return float(value)


def statement(recipe: FederatedRecipe, metrics: dict[str, Any]) -> dict[str, float]:
    """The site's (epsilon, delta), computed from the mechanism its answer declares.

    Raises:
        Unacceptable: a figure is missing or not a number, or the mechanism is not the plan's
            (other steps, a sample rate the recipe's batch cannot give, another delta than the
            declared one, or an epsilon over the target).
    """
    sigma, rate = _number(metrics, "noise_multiplier"), _number(metrics, "sample_rate")
    steps, planned = _number(metrics, "steps"), _number(metrics, "planned_steps")
    delta = _number(metrics, "delta")
    if steps != recipe.local_steps or planned != recipe.rounds * recipe.local_steps:
        raise Unacceptable(f"steps {steps:g} of {planned:g} are not the plan's "
                           f"{recipe.local_steps} of {recipe.rounds * recipe.local_steps}")
    if not 0 < rate <= 1 or (recipe.batch_size is None and rate != 1.0):
        raise Unacceptable(f"sample rate {rate!r} is not the plan's")
    if not 0 < delta < 1 or (recipe.delta is not None and delta != recipe.delta):
        raise Unacceptable(f"delta {delta!r} is not the plan's")
    if sigma <= 0:
        raise Unacceptable(f"noise multiplier {sigma!r} is not positive")
    epsilon = _epsilon(sigma, rate, int(planned), delta)
    if not epsilon <= recipe.target_epsilon * (1 + EPSILON_TOLERANCE):
        raise Unacceptable(f"the declared mechanism spends epsilon {epsilon:.4g}, over the "
                           f"federation's target {recipe.target_epsilon:g}")
    return {"epsilon": epsilon, "delta": delta}


def check_shapes(arrays: list[np.ndarray], model: list[np.ndarray]) -> None:
    """Raises Unacceptable unless ``arrays`` are finite and shaped as the round's ``model``."""
    if [a.shape for a in arrays] != [m.shape for m in model]:
        raise Unacceptable(f"weights of shapes {[a.shape for a in arrays]} are not the "
                           f"model's {[m.shape for m in model]}")
    if not all(np.isfinite(a).all() for a in arrays):
        raise Unacceptable("weights that are not finite")


def _histogram(value: Any, n_bins: int) -> None:
    if not isinstance(value, dict):
        raise Unacceptable("a histogram is not an object")
    for side in ("negatives", "positives"):
        counts = np.asarray(value.get(side), dtype=object)
        if counts.shape != (n_bins,) or not all(
                isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c)
                for c in counts):
            raise Unacceptable(f"a histogram's {side} are not {n_bins} finite counts")


def evaluation(text: Any) -> dict[str, Any]:
    """A site's evaluation answer, parsed and checked: a histogram release over the bins its
    band thresholds give, with a finite noise and every grouping it names.

    Raises:
        Unacceptable: anything else (not JSON, missing parts, other bins, bad counts).
    """
    try:
        if not isinstance(text, str):
            raise Unacceptable("no evaluation")
        answer = json.loads(text)
        release, thresholds = answer["release"], answer["band_thresholds"]
        bins = all_edges(bin_edges(thresholds))
        sent = np.asarray(release["bins"], dtype=np.float64)
        if sent.shape != bins.shape or not np.allclose(sent, bins, rtol=0, atol=BINS_ROUNDING):
            raise Unacceptable("bins that are not the band thresholds'")
        noise = float(release["noise_std"])
        groupings, histograms = release["groupings"], release["histograms"]
        _histogram(histograms["all"], len(bins) - 1)
        by_grouping = histograms["by_grouping"]
        if not math.isfinite(noise) or noise < 0 or set(by_grouping) != set(groupings):
            raise Unacceptable("a noise or groupings that do not fit the histograms")
        for name, labels in groupings.items():
            if (not isinstance(labels, list) or set(by_grouping[name]) != set(labels)
                    or len(set(labels)) != len(labels)):
                raise Unacceptable(f"grouping {name!r} does not list its histograms")
            for label in labels:
                _histogram(by_grouping[name][label], len(bins) - 1)
    except Unacceptable:
        raise
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise Unacceptable(f"not an evaluation release: {exc!r}") from exc
    return {"release": release, "band_thresholds": thresholds}


def agreeing(evaluations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluations over the thresholds most of them share: a sum needs one set of bins,
    and one site's other thresholds must not set aside everyone else's."""
    if not evaluations:
        return []
    keys = [json.dumps(e["band_thresholds"], sort_keys=True) for e in evaluations]
    common, _ = Counter(keys).most_common(1)[0]
    return [e for e, key in zip(evaluations, keys, strict=True) if key == common]
