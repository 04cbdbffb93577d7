"""The dataset report's per-patient figures (``app.reports.patient_report``): the budget of the
dataset's patient space, what its most-spent patients have used, and, for the roles that may
read it, the blocks of patients with their spend over time."""

from typing import Annotated

from pydantic import Field

from app.core.schemas import ResponseModel
from app.privacy.annotations import Released
from app.privacy.releases import Release
from app.reports.report_types import Epsilon, ReportDatetime

BLOCK_SIZE = Released(Release.INTAKE, note="a block's exact patient count: admins and data "
                      "stewards only (null for others)")
BLOCK_TIMELINE = Released(Release.INTAKE, note="a block's spend over time "
                          "(PatientBlockView.timeline): admins and data stewards only")
SPACE_BUDGET = Released(Release.PUBLIC_INPUT, note="the per-patient budget of the dataset's "
                        "patient space and its rule in words")
BLOCK_SPEND = Released(Release.INTAKE, note="the spend of the dataset's most-spent live block of "
                       "patients: it depends on which other tables hold them, so admins and data "
                       "stewards only; null for others")
BLOCK = Released(Release.INTAKE, note="which datasets a block's patients share (a block exists "
                 "only where patients are: an exact fact about the tables' id sets, no mechanism; "
                 "PatientBudgetView.blocks): admins and data stewards only, who hold the tables; "
                 "null for others")


class BlockPointView(ResponseModel):
    """A block's spend right after one more charged release on one of its datasets."""

    entry_id: Annotated[int, BLOCK_TIMELINE]
    dataset_id: Annotated[int, BLOCK_TIMELINE]
    at: Annotated[ReportDatetime, BLOCK_TIMELINE]
    epsilon: Annotated[Epsilon, BLOCK_TIMELINE] = Field(
        description="the block's composed spend by the per-patient filter")


class PatientBlockView(ResponseModel):
    """Patients in exactly the same datasets: every release on any of them charges them all."""

    id: Annotated[int, BLOCK]
    datasets: Annotated[list[int], BLOCK] = Field(
        description="the datasets its patients are in")
    size: Annotated[int | None, BLOCK_SIZE] = Field(
        description="how many patients: an exact count about private data, shown to admins and "
        "data stewards only (null for others)")
    live: Annotated[bool, BLOCK] = Field(
        description="false: a later upload split it (its parts carry on)")
    created_at: Annotated[ReportDatetime, BLOCK]
    closed_at: Annotated[ReportDatetime | None, BLOCK]
    spent_epsilon: Annotated[Epsilon, BLOCK] = Field(
        description="its composed spend by the per-patient filter (a closed block's, as it was "
        "when it closed)")
    spent_epsilon_text: Annotated[str, BLOCK]
    timeline: list[BlockPointView] = Field(description="its spend after each charged release")


class PatientBudgetView(ResponseModel):
    """The per-patient budget that every release on the dataset also answers to."""

    space: Annotated[str, SPACE_BUDGET] = Field(
        description="organisation (the organisation's private uploads share it) or dataset (the "
        "dataset's patients are in no other table)")
    epsilon: Annotated[float, SPACE_BUDGET]
    delta: Annotated[float, SPACE_BUDGET]
    filter_order: Annotated[float, SPACE_BUDGET] = Field(
        description="the per-patient Rényi filter's fixed order")
    spent_epsilon: Annotated[Epsilon, BLOCK_SPEND] = Field(
        description="the composed spend of the dataset's most-spent patients (its live block with "
        "the most spent): admins and data stewards only (null for other roles: it depends on which "
        "other tables hold the dataset's patients)")
    spent_epsilon_text: Annotated[str, BLOCK_SPEND]
    remaining_epsilon: Annotated[float | None, BLOCK_SPEND] = Field(
        description="what the dataset's most-spent patients have left of the per-patient budget (a "
        "release leaves out the patients who cannot afford it): admins and data stewards only")
    withheld: Annotated[str | None, SPACE_BUDGET] = Field(
        default=None,
        description="why the spend figures are null for this role")
    statement: Annotated[str, SPACE_BUDGET] = Field(
        description="the per-patient guarantee in words")
    blocks: list[PatientBlockView] | None = Field(
        description="every block of the dataset's patients, live or closed, with its spend over "
        "time: data stewards, privacy officers and admins only (null for other roles)")
