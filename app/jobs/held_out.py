"""A training job's held-out releases as it stores them, typed key by key: the evaluation
part's one noisy histogram release and the metrics computed from it alone, the calibration
part's DP Platt record (``worker.calibration.Calibration``), and the parts below their size
floor. ``app.jobs.results.HeldOutEvaluation`` holds them together; each field names its release.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.privacy.annotations import PUBLIC, Released, class_note
from app.privacy.releases import Release

Interval = Annotated[list[float], Field(min_length=2, max_length=2)] | None
"""[low, high] of a 95% interval over the release (null: not computed or undefined)."""

EVALUATED = Released(Release.DP_EVALUATION)
EVALUATED_PUBLIC = Released(Release.DP_EVALUATION, Release.PUBLIC_INPUT)
SHOWN_BY_ROWS_NOTE = ("shown or withheld by the band's rows estimated apart from its own noisy "
                      "cells: the part's public row count less the noisy rows outside the band "
                      "(a group: the whole part's band less the other groups')")
BAND_PRECISION = Released(Release.DP_EVALUATION, Release.PUBLIC_BY_CONVENTION,
                          note=SHOWN_BY_ROWS_NOTE)
EVALUATED_NOTES = Released(Release.DP_EVALUATION, Release.PUBLIC_INPUT,
                           Release.PUBLIC_BY_CONVENTION, note="why a figure is withheld: noisy "
                           "counts against public floors, and a band's rows estimated from the "
                           "part's public row count less the noisy rows outside it")
PLATT_NOTE = ("DP Platt scaling: one Gaussian release of binned counts of the calibration part; "
              "exact only on a public dataset trained non-privately")
PLATT_CALIBRATED = Released(Release.DP_CALIBRATION, note=PLATT_NOTE)
PLATT_LEDGER = Released(Release.LEDGER, note=PLATT_NOTE)
PLATT_ROWS = Released(Release.PUBLIC_BY_CONVENTION, note=PLATT_NOTE)
PLATT_PUBLIC = Released(Release.PUBLIC_INPUT, note=PLATT_NOTE)
FLOOR_NOTE = ("a held-out part's row count against its size floor, a public rule of the noise "
              "multiplier and the public bins (app.jobs.size_floor)")
FLOOR_LEDGER = Released(Release.LEDGER, note=FLOOR_NOTE)
FLOOR_ROWS = Released(Release.PUBLIC_BY_CONVENTION, note=FLOOR_NOTE)
FLOOR_ROWS_LEDGER = Released(Release.PUBLIC_BY_CONVENTION, Release.LEDGER, note=FLOOR_NOTE)
FLOOR_PUBLIC = Released(Release.PUBLIC_INPUT, note=FLOOR_NOTE)
NOISY_COUNTS = Released(Release.DP_EVALUATION, Release.PUBLIC_INPUT, note="noisy counts under the "
                        "public groupings' and labels' names")
CUT_OFF = Released(Release.PUBLIC_INPUT, note="the band's public cut-offs")
MECHANISM_NOTE = "the mechanism, its public parameters (bins and groupings from the schema)"
MECHANISM_LEDGER = Released(Release.LEDGER, note=MECHANISM_NOTE)
MECHANISM_PUBLIC = Released(Release.PUBLIC_INPUT, note=MECHANISM_NOTE)


class Stored(BaseModel):
    """A stored result object: no key beyond the fields below."""

    model_config = ConfigDict(extra="forbid")


class HeldOutCounts(Stored):
    """One released histogram: noisy counts per public score bin, by outcome."""

    negatives: Annotated[list[float], EVALUATED]
    positives: Annotated[list[float], EVALUATED]


class HeldOutHistograms(Stored):
    all: HeldOutCounts
    by_grouping: Annotated[dict[str, dict[str, HeldOutCounts]], NOISY_COUNTS] = Field(
        description="grouping -> group label (both from the public schema) -> its histogram")


class HeldOutRelease(Stored):
    """The mechanism, its parameters and the noisy histograms as released."""

    mechanism: Annotated[str, MECHANISM_PUBLIC]
    exact: Annotated[bool, MECHANISM_LEDGER] = Field(
        description="noise multiplier 0: exact counts (public datasets only)")
    noise_multiplier: Annotated[float, MECHANISM_LEDGER]
    l2_sensitivity: Annotated[float, MECHANISM_PUBLIC]
    noise_std: Annotated[float, MECHANISM_LEDGER]
    bins: Annotated[list[float], MECHANISM_PUBLIC] = Field(
        description="the public bin edges, 0 to 1")
    groupings: Annotated[dict[str, list[str]], MECHANISM_PUBLIC] = Field(
        description="grouping -> its group labels (from the public schema)")
    histograms: HeldOutHistograms
    post_processing: Annotated[str, MECHANISM_PUBLIC]


class HeldOutBandView(Stored):
    """Rows in a band (``exactly``) or in it and above (``at_or_above``)."""

    rows: Annotated[float, EVALUATED]
    positives: Annotated[float, EVALUATED]
    share_of_rows: Annotated[float | None, EVALUATED]
    share_of_rows_ci: Annotated[Interval, EVALUATED]
    precision: Annotated[float | None, BAND_PRECISION]
    precision_ci: Annotated[Interval, BAND_PRECISION]
    recall: Annotated[float | None, EVALUATED]
    recall_ci: Annotated[Interval, EVALUATED]


class HeldOutBand(Stored):
    p_from: Annotated[float, CUT_OFF]
    p_to: Annotated[float, CUT_OFF]
    exactly: HeldOutBandView
    at_or_above: HeldOutBandView


class HeldOutBands(Stored):
    low: HeldOutBand
    medium: HeldOutBand
    high: HeldOutBand


class GroupMetrics(Stored):
    """The metrics of the whole evaluation part, and of each subgroup."""

    rows: Annotated[float, EVALUATED] = Field(description="noisy count, one decimal")
    positives: Annotated[float, EVALUATED] = Field(description="noisy count, one decimal")
    prevalence: Annotated[float | None, EVALUATED]
    prevalence_ci: Annotated[Interval, EVALUATED]
    roc_auc: Annotated[float | None, EVALUATED]
    roc_auc_ci: Annotated[Interval, EVALUATED]
    pr_auc: Annotated[float | None, EVALUATED]
    pr_auc_ci: Annotated[Interval, EVALUATED]
    brier: Annotated[float | None, EVALUATED]
    brier_ci: Annotated[Interval, EVALUATED]
    brier_baseline: Annotated[float | None, EVALUATED]
    bands: HeldOutBands


class HeldOutSubgroup(GroupMetrics):
    model_config = ConfigDict(json_schema_extra=class_note(
        "the same metrics per group of a grouping from the public schema"))

    grouping: Annotated[str, PUBLIC]
    group: Annotated[str, PUBLIC]
    notes: Annotated[list[str], EVALUATED_PUBLIC]


class HeldOutBin(Stored):
    """One public bin of the reliability diagram."""

    p_from: Annotated[float, PUBLIC]
    p_to: Annotated[float, PUBLIC]
    p_representative: Annotated[float, PUBLIC]
    rows: Annotated[float, EVALUATED]
    positives: Annotated[float, EVALUATED]
    observed_rate: Annotated[float | None, EVALUATED]
    observed_ci: Annotated[Interval, EVALUATED]


class HeldOutRocPoint(Stored):
    threshold: Annotated[float, PUBLIC]
    fpr: Annotated[float | None, EVALUATED]
    tpr: Annotated[float | None, EVALUATED]


class HeldOutThresholds(Stored):
    low_medium: Annotated[float, PUBLIC]
    medium_high: Annotated[float, PUBLIC]


class HeldOutDefinitions(Stored):
    """What each figure means (``worker.evaluation_text.DEFINITIONS``)."""

    release: Annotated[str, PUBLIC]
    rows: Annotated[str, PUBLIC]
    roc_auc: Annotated[str, PUBLIC]
    pr_auc: Annotated[str, PUBLIC]
    brier: Annotated[str, PUBLIC]
    reliability: Annotated[str, PUBLIC]
    roc_curve: Annotated[str, PUBLIC]
    bands: Annotated[str, PUBLIC]
    ci: Annotated[str, PUBLIC]
    none: Annotated[str, PUBLIC]
    subgroups: Annotated[str, PUBLIC]


class CalibrationRecord(Stored):
    """DP Platt scaling on the calibration part (``worker.calibration.Calibration``)."""

    method: Annotated[str, PLATT_PUBLIC]
    rows: Annotated[int, PLATT_ROWS] = Field(description="the calibration part's rows")
    noise_multiplier: Annotated[float, PLATT_LEDGER]
    slope: Annotated[float, PLATT_CALIBRATED]
    intercept: Annotated[float, PLATT_CALIBRATED]
    bin_edges_logit: Annotated[list[float], PLATT_PUBLIC]
    noisy_counts: Annotated[list[float], PLATT_CALIBRATED]
    noisy_positives: Annotated[list[float], PLATT_CALIBRATED]


class HeldOutWarning(Stored):
    """A held-out part below its size floor at the job's noise (``app.jobs.size_floor``)."""

    release: Annotated[Literal["calibration", "evaluation"], FLOOR_PUBLIC]
    rows: Annotated[int, FLOOR_ROWS] = Field(description="the part's rows")
    minimum_rows: Annotated[int, FLOOR_LEDGER] = Field(
        description="its floor at the job's noise (a public rule)")
    released: Annotated[bool, FLOOR_ROWS_LEDGER] = Field(
        description="false: nothing was released (the calibration); true: released, but mostly "
        "noise (the evaluation)")
    message: Annotated[str, FLOOR_ROWS_LEDGER]
