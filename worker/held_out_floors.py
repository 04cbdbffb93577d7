"""Which held-out release a trained model could not make meaningful, in words it carries.

The size floors are ``app.jobs.size_floor``'s public rule; here they are read at the job's own
held-out noise (``app.privacy.parallel.held_out_noise``) against the parts' row counts (public
by convention), after the releases: the calibration's record says whether it was withheld
(``worker.calibration.calibrate_if_meaningful``), the evaluation's release record gives its
noise and its public bins. The warnings are stored with the job's metrics
(``app.jobs.held_out.HeldOutWarning``); the statement, the model card and the dashboard show them.
"""

from collections.abc import Mapping
from typing import Any

from app.jobs import size_floor
from app.privacy.accounting import History
from worker.calibration import Calibration, release_floor_rows


def _warning(part: str, rows: int, minimum: int, *, released: bool,
             epsilon: float) -> dict[str, Any]:
    return {"release": part, "rows": int(rows), "minimum_rows": int(minimum),
            "released": released,
            "message": size_floor.shortfall_message(part=part, rows=rows, minimum=minimum,
                                                    epsilon=epsilon)}


def held_out_warnings(*, calibration: Calibration, metrics: Mapping[str, Any],
                      evaluation_rows: int, epsilon: float,
                      history: History | None = None) -> list[dict[str, Any]]:
    """The held-out parts below their floor at the job's noise (empty: both meaningful).

    Args:
        calibration: the calibration's record (withheld or released).
        metrics: the evaluation's output (``worker.evaluation.evaluate``), its release record
            included.
        evaluation_rows: the evaluation part's rows (public by convention).
        epsilon: the job's PLD epsilon (``math.inf``: non-private), for the words only.
        history: the training's plan, whose kind sets the calibration's floor
            (``worker.calibration.release_floor_rows``; none given: no plan, the size floor).
    """
    warnings = []
    if calibration.method == size_floor.CALIBRATION_WITHHELD:
        warnings.append(_warning("calibration", calibration.rows,
                                 release_floor_rows(calibration.noise_multiplier, history or []),
                                 released=False, epsilon=epsilon))
    release = metrics["release"]
    minimum = size_floor.evaluation_floor(noise_std=float(release["noise_std"]),
                                          bins=len(release["bins"]) - 1)
    if evaluation_rows < minimum:
        warnings.append(_warning("evaluation", evaluation_rows, minimum, released=True,
                                 epsilon=epsilon))
    return warnings
