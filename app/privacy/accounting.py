"""Privacy accountants behind one small interface, and the Rényi composition the ledger uses.

Every figure is computed from a history of dp-accounting ``DpEvent``s (``app.privacy.events``);
a ``Mechanism`` (noise multiplier, sample rate, steps) is DP-SGD's event for short. An epsilon
is never stored on its own. The parts of a history with a kernel here are computed by it, so
the figures stay those the ledger has always given: the Poisson-subsampled Gaussian by Opacus'
RDP analysis (at fractional orders dp-accounting's ``RdpAccountant`` bounds it from above, up
to several times higher at orders near 1) and by ``app.privacy.pld``; the Gaussian and Laplace
one-shot mechanisms in closed form (``app.privacy.mechanisms``). Any other event is composed
by dp-accounting's ``RdpAccountant`` on the same orders, so a new kind of release needs no new
code here; one that no accountant supports counts as non-private (never under-reported).

* ``rdp``: Rényi DP over a fixed grid of orders. Composition by adding RDP curves is sound even
  when each next job is chosen after seeing earlier results, so the ledger's admission (a privacy
  filter) uses it.
* ``pld`` (the name people read: API keys ``pld``; ``prv``, from when this was Opacus' PRV
  accountant, is its deprecated alias in answers for one release and still its registry key,
  its figure key inside and its database column ``epsilon_prv``): the job's headline epsilon,
  dp-accounting's privacy loss distribution (PLD, pessimistic connect-the-dots;
  ``app.privacy.pld``). An upper bound at any discretisation, within about 1% of
  dp-accounting's own PLDAccountant, where Opacus' PRV carried a fixed +0.01 (+5% at
  epsilon 0.2, +20% at 0.04). Reported beside RDP and used to pick noise for a target.
"""

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from dp_accounting.dp_event import DpEvent, RepeatAndSelectDpEvent
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from app.privacy import events, foreign, mechanisms, pld
from app.privacy.accountant_names import DEPRECATED_PLD_KEY, PLD_KEY
from app.privacy.integer_orders import INTEGER_ORDERS, integer_order_rdp
from app.privacy.orders import RDP_ORDERS

MIN_NOISE_MULTIPLIER = 0.3  # below this DP is nominal
MAX_NOISE_MULTIPLIER = 100.0  # beyond this a model learns nothing useful
# The headline PLD's composed PMF is capped at this many points (its interval grows past
# dp-accounting's default 1e-4 to fit): tens of ms and a few MB per evaluation on 2 cores.
MAX_PLD_POINTS = pld.MAX_PMF_POINTS
# The noise search evaluates many candidates with a quarter of the points (a little looser),
# then checks the chosen noise with the headline accountant.
SEARCH_PLD_POINTS = pld.MAX_PMF_POINTS // 4


@dataclass(frozen=True)
class Mechanism:
    """``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Args:
        noise_multiplier: sigma, noise std divided by the clip norm; 0 means non-private.
        sample_rate: Poisson inclusion probability q of each record per step, in (0, 1].
        steps: number of noisy gradient steps, >= 0.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int

    @property
    def non_private(self) -> bool:
        return self.noise_multiplier <= 0.0

    @property
    def event(self) -> DpEvent:
        """The dp-accounting event: ``steps`` self-composed Poisson-subsampled Gaussians."""
        return events.dpsgd(self.noise_multiplier, self.sample_rate, self.steps)


# What an accountant composes: dp-accounting events, DP-SGD's as a ``Mechanism`` for short.
History = Sequence[Mechanism | DpEvent]


def leaves_of(history: History) -> events.Leaves:
    """The history's parts as the accountants read them (``events.leaves``)."""
    return events.leaves([h.event if isinstance(h, Mechanism) else h for h in history])


def as_mechanism(history: History) -> Mechanism | None:
    """The history as one ``Mechanism`` (sigma, q, steps) where it is exactly one (subsampled)
    Gaussian part run some number of times; else None."""
    parts = leaves_of(history)
    if len(parts.gaussian) != 1 or parts.laplace or parts.other or parts.non_private:
        return None
    return Mechanism(*parts.gaussian[0])


class Accountant(Protocol):
    name: str  # the registry key, stored with every figure
    description: str  # what reports may print

    def epsilon(self, history: History, delta: float) -> float:
        """Epsilon of the composed history at ``delta``; ``inf`` if any entry is non-private."""
        ...


@lru_cache(maxsize=4096)
def _rdp_per_step(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    """One step's RDP on the fixed grid (Opacus' analysis). RDP composes linearly in steps,
    so one curve per (sigma, q) serves every step count: per-epoch commits stay cheap.
    Opacus is imported here, not above: its package loads torch, which the API need not."""
    from opacus.accountants.analysis.rdp import compute_rdp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha": grid is fixed
        curve = compute_rdp(
            q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(RDP_ORDERS)
        )
    curve = np.atleast_1d(np.asarray(curve, dtype=float))
    curve.setflags(write=False)
    return curve


@lru_cache(maxsize=8192)
def step_rdp(noise_multiplier: float, sample_rate: float, order: float) -> float:
    """One step's RDP at one order (Opacus' analysis, as ``rdp_curve`` uses on the grid)."""
    from opacus.accountants.analysis.rdp import compute_rdp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1,
                                 orders=[order])[0])


def _other_rdp(parts: events.Leaves, orders: np.ndarray) -> np.ndarray:
    """dp-accounting's RDP of the parts without a kernel here (``foreign``); inf if none."""
    total = np.zeros(len(orders))
    for event, count in parts.other:
        found = foreign.curve(event, orders, RDP_ORDERS)
        if found is None:
            return np.full(len(orders), np.inf)
        total = total + count * found
    return total


def rdp_curve(history: History) -> np.ndarray:
    """The composed RDP curve (sum over the history's parts) on the fixed order grid."""
    parts = leaves_of(history)
    if parts.non_private:
        return np.full(len(RDP_ORDERS), np.inf)
    total = np.zeros(len(RDP_ORDERS))
    for sigma, q, count in parts.gaussian:
        total += count * _rdp_per_step(sigma, q)
    for multiplier, count in parts.laplace:
        total += count * mechanisms.laplace_rdp(1.0 / multiplier, ORDERS)
    if parts.other:
        total += _other_rdp(parts, ORDERS)
    return total


def rdp_at_order(history: History, order: float) -> float:
    """RDP of ``history`` at one ``order`` (inf when any part is non-private), computed at that
    order only: the filter never needs the others."""
    parts = leaves_of(history)
    if parts.non_private:
        return math.inf
    total = 0.0
    for sigma, q, count in parts.gaussian:
        total += count * step_rdp(sigma, q, order)
    for multiplier, count in parts.laplace:
        total += count * float(mechanisms.laplace_rdp(1.0 / multiplier, np.array([order]))[0])
    if parts.other:
        total += float(_other_rdp(parts, np.array([order]))[0])
    return total


def pure_epsilon(history: History) -> float:
    """The pure (delta 0) epsilon of the history: the sum of its Laplace parts' epsilons; inf
    when any part is not pure DP (a Gaussian, a non-private step, another kind)."""
    parts = leaves_of(history)
    if parts.non_private or parts.gaussian or parts.other:
        return math.inf
    return math.fsum(count / multiplier for multiplier, count in parts.laplace)


ORDERS = np.array(RDP_ORDERS, dtype=float)
def integer_order_epsilon(history: Sequence[tuple[float, float, int]], delta: float) -> float:
    """Epsilon of (sigma, q, steps) compositions from the integer orders alone.

    Never below the full grid's RDP epsilon (a subset of the same orders); usually above the
    PLD (not always: at tiny per-step losses the PLD's 1e-4 discretisation is the looser).
    """
    curve = np.zeros(len(INTEGER_ORDERS))
    for sigma, q, steps in history:
        curve = curve + integer_order_rdp(sigma, q, steps)
    return rdp_to_epsilon(curve, delta, orders=INTEGER_ORDERS)


def rdp_to_epsilon(curve: np.ndarray, delta: float, orders: np.ndarray | None = None) -> float:
    """Convert an RDP curve to (epsilon, delta)-DP (Balle et al. 2020, as Opacus and dp-accounting).

    eps = min_a  rdp(a) + log((a-1)/a) - (log(delta) + log(a)) / (a-1), over ``orders`` (the
    fixed grid unless given).
    """
    orders = ORDERS if orders is None else orders
    if not np.any(np.isfinite(curve)):  # an order without a finite bound just drops out
        return math.inf
    if not np.any(curve):  # nothing was spent; the conversion's slack is not a spend
        return 0.0
    eps = curve - (np.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
    return float(max(np.nanmin(eps), 0.0))


def finite_or_none(value: float | None) -> float | None:
    """An epsilon as JSON can carry it: infinity (non-private) becomes None."""
    return None if value is None or math.isinf(value) else value


def poisson_plan(n_rows: int, batch_size: int) -> tuple[float, int]:
    """(sample rate, steps per epoch) exactly as Opacus' DPDataLoader derives them.

    The ledger charges this plan and the trainers check they sample by it: one definition.
    """
    sample_rate = 1.0 / math.ceil(n_rows / batch_size)
    return sample_rate, int(1 / sample_rate)


SELECTION_TAIL_SHARE = 0.1
"""The share of delta a hyper-parameter search's figure leaves to the tail of its number of runs.

The worker always executes a public number M of runs and keeps the best of the first min(K, M)
(``worker.search``), so its timing cannot tell K. That differs from the analysed repeat-and-select
only when K > M; on every other draw the outputs coincide, so if the analysed search is
(eps, d)-DP the executed one is (eps, d + (1 + e^eps) P(K > M))-DP. M is the smallest count whose
term fits in this share of delta (``app.privacy.selection.executed_runs``), and a search's RDP is
converted at the rest of delta: its stated (eps, delta) covers the tail. A tenth costs at most
log(10/9) / (order - 1) in epsilon, and M grows only with log(1 / delta)."""


def conversion_delta(history: History, delta: float) -> float:
    """The delta a history's RDP is converted at: ``delta``, less the tail's share when the
    history holds a hyper-parameter search (``SELECTION_TAIL_SHARE``)."""
    if any(isinstance(event, RepeatAndSelectDpEvent) for event, _ in leaves_of(history).other):
        return (1.0 - SELECTION_TAIL_SHARE) * delta
    return delta


class RDPAccountant:
    name = "rdp"
    description = "Rényi DP (RDP), composed across jobs by the ledger"

    def epsilon(self, history: History, delta: float) -> float:
        """RDP converted at ``delta`` (a search's at ``conversion_delta``: its tail's share
        is part of ``delta``)."""
        return rdp_to_epsilon(rdp_curve(history), conversion_delta(history, delta))


class PLDAccountant:
    """The headline epsilon: dp-accounting's PLD (``app.privacy.pld``), an upper bound.

    Pessimistic connect-the-dots discretisation, FFT composition and tails charged as infinite
    loss make the PLD an upper bound on the true epsilon at any discretisation (Doroshenko et
    al. 2022; dp-accounting's PLDAccountant, which it matches to ~1e-4 relative at its default
    interval 1e-4). The interval grows past 1e-4 only to keep the composed PMF within
    ``max_points``: coarser is looser, never unsound. Full-batch histories (q = 1) use the
    exact Gaussian epsilon. Where the PLD cannot certify ``delta`` (delta below the 1e-15 tail
    mass it charges, or a numerical failure) the RDP epsilon, also an upper bound, is returned,
    so an unusual but legal delta is never a server error. Past 100,000 steps or below delta
    1e-9, where the FFT's float rounding was measured to move the figure by up to ~4% and no
    independent implementation referees it, the figure carries a stated margin, never beyond
    RDP (``rounding_margin``).

    The registry key stays ``prv`` (stored columns; ``create_accountant("pld")`` finds it too,
    and answers name it ``pld`` beside the deprecated ``prv``); ``description`` names it.
    """

    name = "prv"
    description = "privacy loss distribution (PLD, dp-accounting's connect-the-dots)"

    def __init__(self, max_points: int = MAX_PLD_POINTS) -> None:
        self.max_points = max_points

    def epsilon(self, history: History, delta: float) -> float:
        """The history's tight epsilon: the PLD of its (subsampled) Gaussian parts; for
        Laplace parts alone the tighter of their pure epsilon and RDP; any other mix, RDP
        (an upper bound too)."""
        parts = leaves_of(history)
        if parts.empty:
            return 0.0
        if parts.non_private:
            return math.inf
        if parts.laplace and not (parts.gaussian or parts.other):
            return min(pure_epsilon(history), RDPAccountant().epsilon(history, delta))
        if parts.laplace or parts.other:
            return RDPAccountant().epsilon(history, delta)
        live = [Mechanism(sigma, q, count) for sigma, q, count in parts.gaussian]
        if all(m.sample_rate >= 1.0 for m in live):
            return gaussian_epsilon(live, delta)
        entries = tuple((m.noise_multiplier, m.sample_rate, m.steps) for m in live)
        try:
            value = pld.pld_epsilon(entries, delta, self.max_points)
        except (ValueError, ArithmeticError):
            value = math.inf
        if not math.isfinite(value):
            return RDPAccountant().epsilon(live, delta)
        margin = rounding_margin(live, delta)
        if margin > 0:  # the FFT's float rounding may under-report: a stated margin, or RDP
            rdp = RDPAccountant().epsilon(live, delta)
            return rdp if margin >= MAX_MARGIN else min(value / (1.0 - margin), rdp)
        return value


# Beyond these the FFT power's float rounding moved the PLD epsilon by up to ~4% either way
# (measured at 1.75 x 10^5 steps and delta 1e-10, app.privacy.pld), where dp-accounting
# cannot referee it (its own PLD rounds alike).
LONG_HORIZON_STEPS = 100_000
TINY_DELTA = 1e-9
MEASURED_DRIFT, MEASURED_AT_STEPS = 0.04, 175_000
MAX_MARGIN = 0.5  # past this, the RDP bound alone


def rounding_margin(history: Sequence[Mechanism], delta: float) -> float:
    """The relative margin the PLD figure of ``history`` at ``delta`` carries for its float
    rounding: 0 where it is refereed (up to 10^5 steps, delta at least 1e-9); elsewhere the
    measured 4%, grown in proportion to the steps past the 1.75 x 10^5 it was measured at
    (the rounding accumulates with each composition). The accountant reports
    ``pld / (1 - margin)``, never more than RDP (an upper bound with no such rounding)."""
    steps = sum(m.steps for m in history)
    if delta >= TINY_DELTA and steps <= LONG_HORIZON_STEPS:
        return 0.0
    return MEASURED_DRIFT * max(1.0, steps / MEASURED_AT_STEPS)


PRVAccountant = PLDAccountant  # the name the registry key ``prv`` had; kept for callers


def gaussian_epsilon(history: Sequence[Mechanism], delta: float) -> float:
    """Exact epsilon of composed full-batch (q = 1) Gaussian mechanisms.

    Without subsampling the privacy loss is exactly Gaussian: T steps at noise sigma compose to
    mu-GDP with mu = sqrt(sum T / sigma^2), and (Balle and Wang 2018) the mechanism is
    (eps, delta)-DP iff delta >= Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2). This is the
    value the PLD approximates numerically (from above), in microseconds.
    """
    mu = math.sqrt(sum(m.steps / m.noise_multiplier**2 for m in history))

    def excess(eps: float) -> float:
        return float(
            ndtr(-eps / mu + mu / 2) - math.exp(eps + log_ndtr(-eps / mu - mu / 2)) - delta
        )

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2
    return float(brentq(excess, 0.0, high, xtol=1e-12, rtol=1e-12))


_REGISTRY: dict[str, type] = {"rdp": RDPAccountant, "prv": PLDAccountant}
ACCOUNTANTS: tuple[str, ...] = tuple(_REGISTRY)


def epsilon_by_accountant(history: History, delta: float) -> dict[str, float]:
    """The history's epsilon at ``delta`` by every registered accountant (``inf``: non-private).

    The one place a job's figures are computed for each accountant: the ledger records them
    with its entry, the job view and the reports show them.
    """
    return {name: create_accountant(name).epsilon(history, delta) for name in ACCOUNTANTS}


def create_accountant(name: str) -> Accountant:
    """Look an accountant up by name (``rdp``, or ``pld``: the headline PLD; ``prv`` is its
    deprecated alias and, for now, its registry key)."""
    if name == PLD_KEY:
        name = DEPRECATED_PLD_KEY
    try:
        return _REGISTRY[name]()
    except KeyError as exc:
        raise ValueError(f"unknown accountant {name!r}; known: {sorted(_REGISTRY)}") from exc


def search_accountant(name: str) -> Accountant:
    """A cheaper stand-in for ``name`` while searching noise: the PLD with SEARCH_PLD_POINTS
    (same figure where the PMF is small, a little looser where it is capped), else ``name``."""
    if name in (PLD_KEY, DEPRECATED_PLD_KEY):
        return PLDAccountant(max_points=SEARCH_PLD_POINTS)
    return create_accountant(name)


def clear_caches() -> None:
    """Forget cached figures (benchmarks measure cold costs)."""
    pld.clear_caches()
    foreign.clear_cache()
    _rdp_per_step.cache_clear()
    step_rdp.cache_clear()
