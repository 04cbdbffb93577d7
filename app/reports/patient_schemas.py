"""The dataset report's per-patient figures (``app.reports.patient_report``): the budget of the
dataset's patient space, what its most-spent patients have used, and, for the roles that may
read it, the blocks of patients with their spend over time."""

from pydantic import Field

from app.core.schemas import ResponseModel
from app.reports.report_types import Epsilon, ReportDatetime


class BlockPointView(ResponseModel):
    """A block's spend right after one more charged release on one of its datasets."""

    entry_id: int
    dataset_id: int
    at: ReportDatetime
    epsilon: Epsilon = Field(description="the block's composed spend by the per-patient filter")


class PatientBlockView(ResponseModel):
    """Patients in exactly the same datasets: every release on any of them charges them all."""

    id: int
    datasets: list[int] = Field(description="the datasets its patients are in")
    size: int | None = Field(description="how many patients: an exact count about private "
                             "data, shown to admins and data stewards only (null for others)")
    live: bool = Field(description="false: a later upload split it (its parts carry on)")
    created_at: ReportDatetime
    closed_at: ReportDatetime | None
    spent_epsilon: Epsilon = Field(description="its composed spend by the per-patient filter "
                                   "(a closed block's, as it was when it closed)")
    spent_epsilon_text: str
    timeline: list[BlockPointView] = Field(description="its spend after each charged release")


class PatientBudgetView(ResponseModel):
    """The per-patient budget that every release on the dataset also answers to."""

    space: str = Field(description="organisation (the organisation's private uploads share "
                       "it) or dataset (the dataset's patients are in no other table)")
    epsilon: float
    delta: float
    filter_order: float = Field(description="the per-patient Rényi filter's fixed order")
    spent_epsilon: Epsilon = Field(
        description="the composed spend of the dataset's most-spent patients (its live block "
        "with the most spent): admins and data stewards only (null for other roles: it "
        "depends on which other tables hold the dataset's patients)")
    spent_epsilon_text: str
    remaining_epsilon: float | None = Field(
        description="what the dataset's most-spent patients have left of the per-patient "
        "budget (a release leaves out the patients who cannot afford it): admins and data "
        "stewards only")
    withheld: str | None = Field(default=None,
                                 description="why the spend figures are null for this role")
    statement: str = Field(description="the per-patient guarantee in words")
    blocks: list[PatientBlockView] | None = Field(
        description="every block of the dataset's patients, live or closed, with its spend over "
        "time: data stewards, privacy officers and admins only (null for other roles)")
