"""The feature spec: one source of truth for generation, validation, scaling and explanations.

Bounds are *public* (instrument ranges, a published cap on sessions), never statistics of the
private data: scaling with the data's own min/max/mean would leak it. The reference point is a
public, clinically ordinary patient, used as the baseline of the Shapley explanations.

The model sees each feature mapped to [-1, 1] over its *model range*: the public bounds, except
where a published clinical range is much narrower than the validation cap. Sessions accept 0-50
(a documented cap) but the model range is 0-15 ("monthly-plus" outpatient care): with the cap,
almost every patient sits in [-1, -0.4], the problem is ill-conditioned (condition number ~350
against ~17) and DP noise swamps the sessions coefficient. Chosen on the public proxy generator
(seeds no dataset uses), never on user data; values above 15 count as 15.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Severity:
    """A published severity band of an instrument, inclusive on both ends."""

    lower: float
    upper: float
    label: str


@dataclass(frozen=True)
class Feature:
    name: str
    label: str
    unit: str
    kind: str  # "integer" | "binary"
    lower: float
    upper: float
    reference: float
    loinc: str | None = None
    severities: tuple[Severity, ...] = ()
    describe: Callable[[float], str] | None = None
    model_upper: float | None = None  # top of the model range when narrower than ``upper``

    def severity(self, value: float) -> Severity | None:
        for band in self.severities:
            if band.lower <= value <= band.upper:
                return band
        return None

    def reason(self, value: float) -> str:
        """A plain-language reason a clinician can read, e.g. 'PHQ-9 22: severe ... (20-27)'."""
        if self.describe is not None:
            return self.describe(value)
        band = self.severity(value)
        shown = f"{value:g}"
        if band is None:
            return f"{self.label} {shown} {self.unit}".strip()
        return f"{self.label} {shown}: {band.label} ({band.lower:g}-{band.upper:g})"


def _flag(present: str, absent: str) -> Callable[[float], str]:
    return lambda value: present if value >= 0.5 else absent


FEATURES: tuple[Feature, ...] = (
    Feature(
        "age", "Age", "years", "integer", 18, 80, 40, loinc="30525-0",
        describe=lambda v: f"Age {v:g} years",
    ),
    Feature(
        "phq9", "PHQ-9", "points", "integer", 0, 27, 5, loinc="44261-6",
        severities=(
            Severity(0, 4, "minimal depressive symptoms"),
            Severity(5, 9, "mild depressive symptoms"),
            Severity(10, 14, "moderate depressive symptoms"),
            Severity(15, 19, "moderately severe depressive symptoms"),
            Severity(20, 27, "severe depressive symptoms"),
        ),
    ),
    Feature(
        "gaf", "GAF", "points", "integer", 1, 100, 70,
        severities=(
            Severity(1, 30, "serious impairment or danger"),
            Severity(31, 50, "serious symptoms"),
            Severity(51, 60, "moderate symptoms"),
            Severity(61, 70, "mild symptoms"),
            Severity(71, 100, "transient or minimal symptoms"),
        ),
    ),
    Feature(
        "num_sessions", "Sessions", "sessions in the last 12 months", "integer", 0, 50, 4,
        describe=lambda v: f"{v:g} sessions in the last 12 months", model_upper=15,
    ),
    Feature(
        "substance_use", "Substance use", "", "binary", 0, 1, 0,
        describe=_flag("substance use recorded", "no substance use recorded"),
    ),
    Feature(
        "prior_crisis", "Prior crisis", "", "binary", 0, 1, 0,
        describe=_flag("prior crisis recorded", "no prior crisis recorded"),
    ),
)

FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}
N_FEATURES = len(FEATURES)
LOWER = np.array([f.lower for f in FEATURES], dtype=np.float64)
UPPER = np.array([f.upper for f in FEATURES], dtype=np.float64)
REFERENCE = np.array([f.reference for f in FEATURES], dtype=np.float64)
MODEL_UPPER = np.array(
    [f.upper if f.model_upper is None else f.model_upper for f in FEATURES], dtype=np.float64
)
def scale(x: np.ndarray) -> np.ndarray:
    """Map raw features to [-1, 1] over their public model ranges (no data statistics)."""
    mid = (MODEL_UPPER + LOWER) / 2.0
    half = (MODEL_UPPER - LOWER) / 2.0
    return (np.clip(x, LOWER, MODEL_UPPER) - mid) / half
