"""What a DP-EBM fit releases, as one dp-accounting event, planned before any row is read.

InterpretML's ``DPExplainableBoostingClassifier`` (interpret-core 0.7.8; Nori, Caruana et al.
2021) makes two kinds of noisy release, both Gaussian, on neighbouring datasets that differ by
one row (add/remove):

* **Binning** (``bin_budget_frac`` of epsilon, half of delta): one histogram per feature, each
  row in one cell, so L2 sensitivity 1; every cell gets noise of std ``noise_scale_binning_``.
  With ``privacy_bounds`` for every feature the histogram's range is public and nothing else is
  read (``EBMPreprocessor.fit``, ``private_numeric_binning``).
* **Boosting** (the rest): ``max_rounds`` cyclic rounds over every term in every outer bag,
  each step one noisy vector of the learning-rate-scaled sums of the log-loss gradients
  (``p - y``, magnitude below 1) over a random, data-independent split of the term's bins: one
  row lands in one section, so L2 sensitivity ``learning_rate``; every section gets noise of
  std ``noise_scale_boosting_`` (``_boost.boost``). The divisor is the binning's noisy weights,
  already public.

Under ``gdp`` composition interpret sets each part's noise so that its queries compose to
mu-GDP at that part's (epsilon, delta) (Dong, Roth and Su; ``calc_gdp_noise_multi``); under
``classic`` it uses the advanced-composition formula ``calc_classic_noise_multi``. Either way
the release *is* ``F`` Gaussians of multiplier ``noise_scale_binning / 1`` and ``T`` Gaussians
of multiplier ``noise_scale_boosting / learning_rate`` (``EbmNoise.releases``); the ledger
charges each part as the one Gaussian those compose to exactly (``EbmNoise.event``).

Interpret splits (epsilon, delta) between the parts and adds them back (basic composition); the
event composes them exactly (Gaussians compose to sqrt(sum 1/sigma_i^2)-GDP, adaptively), which
is tighter: at interpret's epsilon 1 and delta 1e-5 the event is (0.87, 1e-5)-DP. So the plan
hands interpret the ``library_epsilon`` at which the exact event spends the job's target, no
more: the ledger charges the target, and the model gets the noise that target pays for.

Everything here is computed from public quantities (the target, the feature count, the
recipe); torch and interpret are not imported, so the API can plan and reserve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dp_accounting.dp_event import ComposedDpEvent, DpEvent, GaussianDpEvent, SelfComposedDpEvent
from scipy.optimize import brentq

from app.privacy.accounting import Mechanism, gaussian_epsilon

Composition = Literal["gdp", "classic"]

NOISE_TOLERANCE = 1e-9
"""Relative gap allowed between a fitted model's noise scale and the plan's: interpret inverts
the GDP curve by bisection, this module with Brent's method; both solve the same equation."""


class NoiseMismatch(ValueError):
    """A fitted model's noise is not what the plan (and the ledger's event) says."""


@dataclass(frozen=True)
class EbmRecipe:
    """A DP-EBM fit's public parameters (interpret's defaults): ``epsilon`` is the job's
    target at ``delta``, what the ledger charges; ``library_epsilon`` is what interpret gets."""

    epsilon: float
    delta: float
    n_features: int
    max_rounds: int = 300
    outer_bags: int = 1
    learning_rate: float = 0.01
    bin_budget_frac: float = 0.1
    max_bins: int = 32
    composition: Composition = "gdp"

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon) and 0 < self.delta < 1):
            raise ValueError("DP-EBM needs a finite epsilon > 0 and a delta in (0, 1)")
        if not 0 < self.bin_budget_frac < 1:
            raise ValueError("bin_budget_frac must lie in (0, 1)")
        if min(self.n_features, self.max_rounds, self.outer_bags) < 1:
            raise ValueError("features, rounds and outer bags must be at least 1")
        if not self.learning_rate > 0:
            raise ValueError("learning_rate must be positive")

    @property
    def boosting_queries(self) -> int:
        """Noisy vectors the boosting releases: every term, every round, every outer bag."""
        return self.max_rounds * self.n_features * self.outer_bags


@dataclass(frozen=True)
class EbmNoise:
    """The noise standard deviations a recipe makes interpret draw, and their event."""

    recipe: EbmRecipe
    library_epsilon: float  # interpret's ``epsilon`` (its basic composition of the parts)
    binning: float  # std per histogram cell (sensitivity 1)
    boosting: float  # std per section sum (sensitivity learning_rate)

    @property
    def releases(self) -> DpEvent:
        """Everything the fit releases, one Gaussian per noisy vector: F binning histograms,
        then T boosting vectors."""
        r = self.recipe
        return ComposedDpEvent([
            SelfComposedDpEvent(GaussianDpEvent(self.binning), r.n_features),
            SelfComposedDpEvent(GaussianDpEvent(self.boosting / r.learning_rate),
                                r.boosting_queries),
        ])

    @property
    def event(self) -> DpEvent:
        """What the ledger charges: ``releases`` with each part's k Gaussians of multiplier
        sigma written as the one Gaussian of multiplier sigma / sqrt(k) they are, exactly
        (the same privacy loss distribution): the binning, then the boosting. Two components,
        the one-shot shape the ledger records for a fitted family's job."""
        r = self.recipe
        return ComposedDpEvent([
            GaussianDpEvent(self.binning / math.sqrt(r.n_features)),
            GaussianDpEvent(self.boosting / r.learning_rate / math.sqrt(r.boosting_queries)),
        ])

    @property
    def equivalent_multiplier(self) -> float:
        """The one Gaussian's noise multiplier the whole release is as private as (the
        composed GDP's 1/mu): what a job shows as its noise."""
        r = self.recipe
        return float(1.0 / math.sqrt(r.n_features / self.binning**2
                                     + r.boosting_queries * (r.learning_rate / self.boosting)**2))

    def check(self, *, binning: float, boosting: float) -> None:
        """Refuse a fitted model whose noise is not the planned noise.

        Raises:
            NoiseMismatch: either scale differs by more than ``NOISE_TOLERANCE``.
        """
        for name, planned, fitted in (("binning", self.binning, binning),
                                      ("boosting", self.boosting, boosting)):
            if not abs(fitted - planned) <= NOISE_TOLERANCE * planned:
                raise NoiseMismatch(f"DP-EBM's {name} noise {fitted!r} is not the planned "
                                    f"{planned!r}: the ledger's event would be wrong")


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the mu-GDP mechanism that is exactly (epsilon, delta)-DP (Balle and Wang)."""

    def excess(mu: float) -> float:
        return gaussian_epsilon([Mechanism(1.0 / mu, 1.0, 1)], delta) - epsilon

    return float(brentq(excess, 1e-6, 1e3, xtol=1e-15, rtol=1e-15))


def _noise(queries: int, epsilon: float, delta: float, sensitivity: float,
           composition: Composition) -> float:
    """One query's noise std when ``queries`` of them share (epsilon, delta), as interpret
    computes it (``calc_gdp_noise_multi`` or ``calc_classic_noise_multi``)."""
    if composition == "gdp":
        return math.sqrt(queries) / gdp_mu(epsilon, delta) * sensitivity
    if composition == "classic":
        variance = 8 * queries * sensitivity**2 * math.log(math.e + epsilon / delta)
        return math.sqrt(variance / epsilon**2)
    raise ValueError(f"unknown composition {composition!r}: 'gdp' or 'classic'")


def _split(recipe: EbmRecipe, library_epsilon: float) -> tuple[float, float]:
    """(binning, boosting) noise std of interpret at ``library_epsilon`` and the recipe's
    delta: the binning gets ``bin_budget_frac`` of epsilon and half of delta, the boosting the
    rest (``EBMModel.fit``)."""
    bin_eps, bin_delta = library_epsilon * recipe.bin_budget_frac, recipe.delta / 2
    return (_noise(recipe.n_features, bin_eps, bin_delta, 1.0, recipe.composition),
            _noise(recipe.boosting_queries, library_epsilon - bin_eps, recipe.delta - bin_delta,
                   recipe.learning_rate, recipe.composition))


def _spent(recipe: EbmRecipe, library_epsilon: float) -> float:
    """The exact epsilon at the recipe's delta of interpret's release at ``library_epsilon``."""
    binning, boosting = _split(recipe, library_epsilon)
    return gaussian_epsilon([Mechanism(binning, 1.0, recipe.n_features),
                             Mechanism(boosting / recipe.learning_rate, 1.0,
                                       recipe.boosting_queries)], recipe.delta)


def plan(recipe: EbmRecipe) -> EbmNoise:
    """The noise a fit of ``recipe`` draws: interpret's at the ``library_epsilon`` whose
    exact event spends ``recipe.epsilon`` at ``recipe.delta`` (see the module docstring)."""
    high = 2.0 * recipe.epsilon
    while _spent(recipe, high) < recipe.epsilon:
        high *= 2.0
    library = float(brentq(lambda e: _spent(recipe, e) - recipe.epsilon, recipe.epsilon, high,
                           xtol=1e-13, rtol=1e-13))
    binning, boosting = _split(recipe, library)
    return EbmNoise(recipe, library, binning, boosting)
