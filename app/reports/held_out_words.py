"""What a model could not release meaningfully, in the words its reports use.

A held-out part below its size floor at the job's noise (``app.jobs.size_floor``) leaves a
warning in the job's stored metrics (``app.jobs.held_out.HeldOutWarning``), and a calibration
part below its floor releases nothing (its record's method says so). The privacy report's
statement, coverage and model card read both through these, so none of them says "calibrated
on a held-out part" of a model that was not.
"""

from typing import Any

from app.jobs import size_floor

WITHHELD_CALIBRATION_TEXT = (
    " Calibration: none was released (the calibration part is below its size floor at this "
    "job's noise), so the probabilities were not calibrated on held-out data: they are the DP "
    "model's own."
)


def held_out_warnings(metrics: dict[str, Any] | None) -> list[str]:
    """The held-out parts below their size floor at the job's noise, in words; empty when
    both releases are meaningful (and for metrics stored before the floors)."""
    return [w["message"] for w in (metrics or {}).get("held_out_warnings") or []]


def warnings_text(metrics: dict[str, Any] | None) -> str:
    """The warnings as one group of sentences of the statement, or ''."""
    warnings = held_out_warnings(metrics)
    return f" Warning: {' '.join(warnings)}" if warnings else ""


def card_warnings(metrics: dict[str, Any] | None) -> list[str]:
    """The warnings as the model card's first caveats."""
    return [f"Warning: {w}" for w in held_out_warnings(metrics)]


def calibration_withheld(metrics: dict[str, Any] | None) -> bool:
    """Whether the calibration was not released (its part below its size floor)."""
    return withheld((metrics or {}).get("calibration"))


def withheld(calibration: dict[str, Any] | None) -> bool:
    """Whether this calibration record is of a calibration not released."""
    return bool((calibration or {}).get("method") == size_floor.CALIBRATION_WITHHELD)


def parallel_sentence(metrics: dict[str, Any] | None) -> str:
    """How the held-out releases compose with the training: both, or the evaluation alone."""
    if calibration_withheld(metrics):
        return ("The evaluation is a DP release on a held-out part, no costlier than the "
                "training, composed in parallel with it: no extra spend.")
    return ("Calibration and evaluation are DP releases on disjoint held-out parts, each no "
            "costlier than the training, composed in parallel with it: no extra spend.")
