"""Every release is a dp-accounting ``DpEvent``: how the ledger stores one, and what it is made of.

The ledger records each release as the event that describes it (``dp_accounting.dp_event``):

* DP-SGD: ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``,
  each step drawing a fresh Poisson sample (the nesting Opacus' and dp-accounting's DP-SGD
  examples use; ``PoissonSampledDpEvent(q, SelfComposedDpEvent(...))`` would be *one* sample
  released ``steps`` times, a different and weaker mechanism). A non-private run puts a
  ``NonPrivateDpEvent`` where the Gaussian would be.
* A statistics release: ``ComposedDpEvent`` of one ``GaussianDpEvent`` or ``LaplaceDpEvent``
  per noisy vector, each by its noise multiplier (noise over sensitivity,
  ``app.privacy.mechanisms``).
* A fitted family's one release (``app.jobs.fitted``): a statistics release's shape, or any
  composition of Gaussians on the whole table (a DP-EBM's binning and boosting queries),
  described as ``GAUSSIAN_COMPOSITION`` by the one Gaussian it equals (1 / sigma^2 adds up).
* A hyper-parameter search: ``RepeatAndSelectDpEvent(<one run's DP-SGD>, mean, shape)``
  (Papernot and Steinke 2022; ``app.privacy.selection``), described by one run's noise and
  sample rate and as one step: it is charged whole. Its shape may be infinite (a Poisson number
  of runs), written ``"inf"``.
* Any other kind: stored and composed as it is, with no new code here (``accounting`` hands
  what it has no kernel for to dp-accounting's accountant).

Serialised form (``to_json``): ``{"type": <class name in dp_accounting.dp_event>, <field>:
<value>, ...}``, nested events as such objects, floats and ints typed by the class's fields,
so that canonical JSON of an event hashes the same after any reload. ``from_json`` only ever
builds classes of ``dp_accounting.dp_event`` (stored text never names a module to import).

``leaves`` is what the accountants read of a list of events: the subsampled-Gaussian and
Laplace parts (for the project's own kernels, which fix today's figures), the parts only
dp-accounting composes, and whether anything is non-private.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from dp_accounting import dp_event
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    LaplaceDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    RepeatAndSelectDpEvent,
    SelfComposedDpEvent,
)

from app.privacy import mechanisms

# The ledger's names for the mechanisms it describes (its ``mechanism`` column).
SUBSAMPLED_GAUSSIAN = "poisson_subsampled_gaussian"
REPEAT_AND_SELECT = "repeat_and_select"  # a hyper-parameter search (app.privacy.selection)
INFINITY = "inf"
"""How a float field holding infinity is written (JSON has no inf): a Poisson number of runs
is ``RepeatAndSelectDpEvent``'s shape infinity."""
NON_PRIVATE = "non_private"
GAUSSIAN_COMPOSITION = "gaussian_composition"
"""Gaussians on the whole table composed (nested compositions included), no other part."""
# One noisy vector of a statistics release, by its mechanism's name.
ONE_SHOT: dict[str, type[DpEvent]] = {
    mechanisms.GAUSSIAN: GaussianDpEvent,
    mechanisms.LAPLACE: LaplaceDpEvent,
}
_NAME_OF_ONE_SHOT = {kind: name for name, kind in ONE_SHOT.items()}


def to_json(event: DpEvent) -> dict[str, Any]:
    """The event as a JSON object (see the module docstring), typed field by field."""
    cls = type(event)
    if getattr(dp_event, cls.__name__, None) is not cls:
        raise ValueError(f"{cls.__name__} is not a dp_accounting.dp_event class")
    out: dict[str, Any] = {"type": cls.__name__}
    for spec in attr.fields(cls):
        out[spec.name] = _value_to_json(getattr(event, spec.name), spec.type)
    return out


def _value_to_json(value: Any, kind: Any) -> Any:
    if isinstance(value, DpEvent):
        return to_json(value)
    if isinstance(value, list | tuple):
        return [_value_to_json(v, None) for v in value]
    if kind is float or (kind is None and isinstance(value, float)):
        value = float(value)
        return INFINITY if value == math.inf else value  # JSON has no inf (Poisson's shape)
    if kind is int or isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float | str) or value is None:
        return value
    raise ValueError(f"cannot serialise {value!r} of a DpEvent")


def from_json(data: Any) -> DpEvent:
    """The event ``to_json`` wrote.

    Raises:
        ValueError: not an event of ``dp_accounting.dp_event``, or its fields do not match.
    """
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError(f"not a serialised DpEvent: {data!r}")
    cls = getattr(dp_event, data["type"], None)
    if not (isinstance(cls, type) and issubclass(cls, DpEvent) and attr.has(cls)):
        raise ValueError(f"unknown DpEvent type {data['type']!r}")
    names = {spec.name: spec.type for spec in attr.fields(cls)}
    if set(data) - {"type"} != set(names):
        raise ValueError(f"{data['type']} has fields {sorted(names)}, got {sorted(data)}")
    values = {name: _value_from_json(data[name], kind) for name, kind in names.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"invalid {data['type']}: {error}") from error


def _value_from_json(value: Any, kind: Any) -> Any:
    if isinstance(value, dict):
        return from_json(value)
    if isinstance(value, list):
        return [_value_from_json(v, None) for v in value]
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is float and value == INFINITY:
        return math.inf
    return value


def canonical(event: DpEvent) -> str:
    """Canonical JSON of the event (sorted keys, no whitespace): a cache key and a hash input."""
    return json.dumps(to_json(event), sort_keys=True, separators=(",", ":"), allow_nan=False)


def dpsgd(noise_multiplier: float, sample_rate: float, steps: int) -> DpEvent:
    """``steps`` DP-SGD steps: each a Poisson sample at rate ``sample_rate`` and Gaussian noise
    of multiplier ``noise_multiplier`` (0 or less: non-private)."""
    step: DpEvent = (NonPrivateDpEvent() if noise_multiplier <= 0.0
                     else GaussianDpEvent(float(noise_multiplier)))
    return SelfComposedDpEvent(PoissonSampledDpEvent(float(sample_rate), step), int(steps))


def one_shot(kind: str, components: Sequence[float]) -> DpEvent:
    """A statistics release: one ``kind`` mechanism per noisy vector, by its multiplier.

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in ONE_SHOT:
        raise ValueError(f"unknown one-shot mechanism {kind!r}; known: {sorted(ONE_SHOT)}")
    return ComposedDpEvent([ONE_SHOT[kind](float(c)) for c in components])


def first_steps(event: DpEvent, steps: int, of: int) -> DpEvent:
    """The part of a release of ``of`` steps that its first ``steps`` steps spent: all of it,
    none (``NoOpDpEvent``), or, for a ``SelfComposedDpEvent`` of ``of`` copies, that many.

    Raises:
        ValueError: a partial charge of an event that is not ``of`` self-composed steps.
    """
    if steps == of:
        return event
    if steps == 0:
        return NoOpDpEvent()
    if not 0 < steps < of or not (isinstance(event, SelfComposedDpEvent) and event.count == of):
        raise ValueError(f"{steps} of {of} steps of {type(event).__name__} is no event")
    return SelfComposedDpEvent(event.event, steps)


@dataclass(frozen=True)
class Description:
    """What the ledger's descriptive columns say of an event (None: the event does not fix it).

    The event is what is accounted; these are kept for reports and checked against it.
    """

    mechanism: str
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    components: list[float] | None = None


def describe(event: DpEvent) -> Description:
    """The columns of the shapes the ledger writes (DP-SGD, a one-shot release); for any
    other event only its mechanism name, the event's class name."""
    if (isinstance(event, SelfComposedDpEvent)
            and isinstance(event.event, PoissonSampledDpEvent)):
        step = event.event.event
        if isinstance(step, GaussianDpEvent):
            return Description(SUBSAMPLED_GAUSSIAN, step.noise_multiplier,
                               event.event.sampling_probability, event.count)
        if isinstance(step, NonPrivateDpEvent):
            return Description(NON_PRIVATE, 0.0, event.event.sampling_probability, event.count)
    if isinstance(event, RepeatAndSelectDpEvent):
        run = describe(event.event)
        if run.mechanism == SUBSAMPLED_GAUSSIAN:
            # One indivisible release (steps 1): a search is charged whole or not at all.
            return Description(REPEAT_AND_SELECT, run.noise_multiplier, run.sample_rate, 1)
    if isinstance(event, ComposedDpEvent) and event.events:
        kinds = {type(e) for e in event.events}
        kind = _NAME_OF_ONE_SHOT.get(kinds.pop()) if len(kinds) == 1 else None
        if kind is not None:
            components = [float(e.noise_multiplier) for e in event.events]
            if all(0.0 < c < math.inf for c in components):
                return Description(kind, mechanisms.equivalent_multiplier(kind, components),
                                   1.0, 1, components)
    if isinstance(event, ComposedDpEvent | SelfComposedDpEvent):
        sigma = _gaussian_composition(event)
        if sigma is not None:
            return Description(GAUSSIAN_COMPOSITION, sigma, 1.0, 1)
    return Description(type(event).__name__)


def _gaussian_composition(event: DpEvent) -> float | None:
    """The noise multiplier of the one Gaussian that ``event`` equals, where it composes
    Gaussians on the whole table and nothing else; else None."""
    try:
        parts = leaves([event])
    except ValueError:
        return None
    if (not parts.gaussian or parts.laplace or parts.other or parts.non_private
            or any(q != 1.0 for _, q, _ in parts.gaussian)):
        return None
    return float(sum(count / sigma**2 for sigma, _, count in parts.gaussian)) ** -0.5


def from_columns(*, mechanism: str, noise_multiplier: float, sample_rate: float, steps: int,
                 components: Sequence[float] | None, release: bool) -> DpEvent:
    """The event an entry written before events were stored (chain scheme 1) records by its
    columns, after the checks the ledger made of them then.

    Raises:
        ValueError: the columns contradict each other or name an unknown mechanism.
    """
    if release:
        if mechanism not in ONE_SHOT:
            raise ValueError(f"unknown mechanism {mechanism!r} for a statistics release")
        values = list(components or [])
        if not values or not all(isinstance(c, int | float) and 0 < c < math.inf
                                 for c in values):
            raise ValueError(f"a {mechanism} release needs positive components")
        expected = mechanisms.equivalent_multiplier(mechanism, values)
        if (sample_rate != 1.0 or steps != 1
                or not math.isclose(noise_multiplier, expected, rel_tol=1e-9)):
            raise ValueError(
                f"noise {noise_multiplier}, sample rate {sample_rate} and {steps} steps "
                f"contradict its {mechanism} components (noise {expected:.6g}, sample rate 1, "
                "one step)")
        return one_shot(mechanism, values)
    if mechanism not in (SUBSAMPLED_GAUSSIAN, NON_PRIVATE):
        raise ValueError(f"unknown mechanism {mechanism!r} for a job")
    if (noise_multiplier <= 0.0) != (mechanism == NON_PRIVATE):
        raise ValueError(f"noise {noise_multiplier} contradicts its mechanism {mechanism!r}")
    return dpsgd(noise_multiplier, sample_rate, steps)


@dataclass
class Leaves:
    """A list of events as the accountants read it, each part with how many times it ran.

    ``gaussian``: (sigma, q, count) Poisson-subsampled Gaussian steps (q = 1: no sampling; a
    ``ComposedDpEvent`` of plain Gaussians is the one Gaussian they compose to, exactly);
    ``laplace``: (multiplier, count); ``other``: events only dp-accounting composes.
    """

    gaussian: list[tuple[float, float, int]] = field(default_factory=list)
    laplace: list[tuple[float, int]] = field(default_factory=list)
    other: list[tuple[DpEvent, int]] = field(default_factory=list)
    non_private: bool = False

    @property
    def empty(self) -> bool:
        return not (self.gaussian or self.laplace or self.other or self.non_private)


def leaves(history: Sequence[DpEvent]) -> Leaves:
    """Split ``history`` into its parts (see ``Leaves``); parts run zero times are dropped.

    Raises:
        ValueError: a noise multiplier that is not positive and finite, a sample rate outside
            (0, 1], or a negative count.
    """
    found = Leaves()
    for event in history:
        _walk(event, 1, found)
    return found


def _walk(event: DpEvent, count: int, found: Leaves) -> None:
    if count < 0:
        raise ValueError(f"a negative count ({count}) of {type(event).__name__}")
    if count == 0 or isinstance(event, NoOpDpEvent):
        return
    if isinstance(event, NonPrivateDpEvent):
        found.non_private = True
    elif isinstance(event, SelfComposedDpEvent):
        if not isinstance(event.count, int) or isinstance(event.count, bool):
            raise ValueError(f"a self-composition count must be an integer: {event.count!r}")
        _walk(event.event, count * event.count, found)
    elif isinstance(event, ComposedDpEvent):
        if event.events and all(isinstance(e, GaussianDpEvent) for e in event.events):
            sigmas = [_noise(e.noise_multiplier) for e in event.events]
            found.gaussian.append((mechanisms.gaussian_multiplier(sigmas), 1.0, count))
            return
        for part in event.events:
            _walk(part, count, found)
    elif isinstance(event, PoissonSampledDpEvent):
        _sampled(event, count, found)
    elif isinstance(event, GaussianDpEvent):
        found.gaussian.append((_noise(event.noise_multiplier), 1.0, count))
    elif isinstance(event, LaplaceDpEvent):
        found.laplace.append((_noise(event.noise_multiplier), count))
    else:
        found.other.append((event, count))


def _sampled(event: PoissonSampledDpEvent, count: int, found: Leaves) -> None:
    q = float(event.sampling_probability)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sample rate {q} outside (0, 1]")
    if isinstance(event.event, GaussianDpEvent):
        found.gaussian.append((_noise(event.event.noise_multiplier), q, count))
    elif isinstance(event.event, NonPrivateDpEvent):
        found.non_private = True
    elif not isinstance(event.event, NoOpDpEvent):
        found.other.append((event, count))


def _noise(value: float) -> float:
    if not 0.0 < value < math.inf:
        raise ValueError(f"noise multiplier {value} is not positive and finite")
    return float(value)
