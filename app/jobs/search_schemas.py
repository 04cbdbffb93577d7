"""The request and response bodies of a training job's hyper-parameter search
(``app.jobs.search`` plans it, ``worker.search`` runs it)."""

from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from app.core.schemas import ALLOWED_RANGES, RequestModel, ResponseModel, register_ranges
from app.jobs.family_field import dp_sgd_family, dp_sgd_family_enum
from app.jobs.results import SearchCandidateRecord
from app.privacy import selection
from app.privacy.accounting import finite_or_none
from app.privacy.annotations import Released
from app.privacy.releases import Release

MAX_CANDIDATES = 32
PLAN_NOTE = ("the search as planned: the request's grid and distribution, and the ledger's "
             "figures of one run and of the whole repeat-and-select release, with the runs "
             "executed whatever K and their tail (functions of the public plan)")
PLAN = Released(Release.PUBLIC_INPUT, note=PLAN_NOTE)
PLAN_LEDGER = Released(Release.LEDGER, note=PLAN_NOTE)
CHARGE = Released(Release.LEDGER, note="a search entry's event, RepeatAndSelectDpEvent, as "
                  "stored")
MAX_MEAN_RUNS = 20.0
SEARCH_KEY = "search"  # where a job keeps its search plan, in its stored ``training``
SHARED = ("batch_size", "epochs", "seed", "world_size")
"""``training``'s for every run: a candidate naming one is refused (the runs must be one
mechanism; the seed only fixes initial weights and the processes only the speed)."""
TUNABLE = ("model", "optimizer", "learning_rate", "momentum", "max_grad_norm", "tail_average",
           "hidden_units")


class SearchCandidate(RequestModel):
    """One point of the public grid: ``training``'s fields it changes (same ranges)."""

    model: str | None = Field(default=None, json_schema_extra=dp_sgd_family_enum)
    optimizer: Literal["adam", "sgd"] | None = None
    learning_rate: float | None = Field(default=None, gt=0, le=10)
    momentum: float | None = Field(default=None, ge=0, lt=1)
    max_grad_norm: float | None = Field(default=None, gt=0, le=100)
    tail_average: float | None = Field(default=None, ge=0, lt=1)
    hidden_units: int | None = Field(default=None, ge=2, le=256)

    @model_validator(mode="before")
    @classmethod
    def _no_plan_fields(cls, value: Any) -> Any:
        """Refuse the sampling plan's fields with words, not pydantic's "extra" error."""
        if isinstance(value, dict):
            named = [key for key in SHARED if key in value]
            if named:
                raise PydanticCustomError(
                    "search_shared_field",
                    "{fields} are the search's, set in training for every run (each run must "
                    "spend the same: one run's DP-SGD event, repeated); a candidate may set "
                    "{tunable}", {"fields": ", ".join(named), "tunable": ", ".join(TUNABLE)})
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _registered_family(cls, value: Any) -> Any:
        """A DP-SGD family: the search repeats one run's DP-SGD event."""
        return value if value is None else dp_sgd_family(value)

    def changes(self) -> dict[str, Any]:
        """The fields this candidate sets."""
        return self.model_dump(exclude_none=True)


class SearchRequest(RequestModel):
    """A random search over public candidates, charged as one repeat-and-select release."""

    candidates: list[SearchCandidate] = Field(min_length=1, max_length=MAX_CANDIDATES)
    runs: selection.Runs = Field(
        description="the distribution of the number of runs K: poisson (K = 0 possible: the job "
        "then fails with nothing released, its charge kept) or truncated_negative_binomial "
        "(K >= 1)")
    mean_runs: float = Field(ge=1, le=MAX_MEAN_RUNS, description="E[K]")
    shape: float | None = Field(
        default=None, ge=0, le=10,
        description="truncated_negative_binomial only: dp-accounting's shape, Papernot and "
        f"Steinke's eta (0: logarithmic, 1: geometric); default {selection.DEFAULT_SHAPE:g}")

    @model_validator(mode="after")
    def _shape_for_tnb(self) -> Self:
        if self.shape is not None and self.runs == selection.POISSON:
            raise PydanticCustomError(
                "search_shape", "shape belongs to truncated_negative_binomial runs; a Poisson "
                "number of runs has none")
        return self


ALLOWED_RANGES["search.candidates"] = f"[1, {MAX_CANDIDATES}] candidates"
for _index in range(MAX_CANDIDATES):  # an error names the candidate by its index
    register_ranges(SearchCandidate, f"search.candidates.{_index}.")


class SearchOut(ResponseModel):
    """A job's search as planned and charged (the outcome is in ``metrics.search``)."""

    candidates: list[SearchCandidateRecord] = Field(
        description="the public grid as planned (each candidate's learning rate resolved)")
    runs: Annotated[str, PLAN]
    mean_runs: Annotated[float, PLAN]
    shape: Annotated[float | None, PLAN] = Field(
        description="eta; null for poisson (dp-accounting: infinity)")
    run_epsilon: Annotated[float | None, PLAN_LEDGER] = Field(
        description="one run's epsilon (PLD) at the job's delta")
    total_epsilon: Annotated[float | None, PLAN_LEDGER] = Field(
        description="the whole search's epsilon at the job's delta: what the ledger charges "
        "(RDP: dp-accounting's RepeatAndSelectDpEvent, converted at the part of delta the tail "
        "leaves; the PLD has no such analysis)")
    executed_runs: Annotated[int, PLAN_LEDGER] = Field(
        description="M: the runs the worker executes whatever K (public, fixed at planning); "
        "the best of the first min(K, M) is kept, the rest discarded, so nothing about the job "
        "tells K")
    tail_probability: Annotated[float, PLAN_LEDGER] = Field(
        description="P(K > M): the only draws on which the executed search differs from the "
        "analysed one")
    tail_delta: Annotated[float, PLAN_LEDGER] = Field(
        description="(1 + e^total_epsilon) tail_probability: the part of the job's delta that "
        "covers K > M, at most a tenth of it (total_epsilon is converted at the rest)")
    accountant: Annotated[str, PLAN_LEDGER]
    note: Annotated[str, PLAN]

    @classmethod
    def of(cls, stored: dict[str, Any] | None, *, run_epsilon: float, total_epsilon: float,
           executed: selection.Executed) -> Self | None:
        if stored is None:
            return None
        return cls(candidates=stored["candidates"], runs=stored["runs"],
                   mean_runs=stored["mean_runs"], shape=stored.get("shape"),
                   run_epsilon=finite_or_none(run_epsilon),
                   total_epsilon=finite_or_none(total_epsilon), executed_runs=executed.runs,
                   tail_probability=executed.tail_probability,
                   tail_delta=selection.tail_delta(total_epsilon, executed.tail_probability),
                   accountant="rdp", note=NOTE)


NOTE = ("A random number K of DP-SGD runs, each on a candidate drawn uniformly from the public "
        "list, scored by a DP release on the calibration part; only the best run is released "
        "(its candidate, model and score: metrics.search). The worker executes executed_runs "
        "runs whatever K and keeps the best of the first K, so the job's timing, progress and "
        "status do not tell K; K > executed_runs is covered by tail_delta, part of the job's "
        "delta. The number of runs used, the other runs' candidates and scores are not "
        "released: Papernot and Steinke's bound covers the best run alone.")


class SearchCharge(ResponseModel):
    """A hyper-parameter search's entry: one run repeated a random number of times, the best
    released (dp-accounting's ``RepeatAndSelectDpEvent``)."""

    runs: Annotated[str, CHARGE] = Field(description="poisson or truncated_negative_binomial")
    mean_runs: Annotated[float, CHARGE]
    shape: Annotated[float | None, CHARGE] = Field(description="eta; null for poisson (infinity)")
    run_steps: Annotated[int, CHARGE] = Field(
        description="one run's DP-SGD steps (noise_multiplier and sample_rate above are one "
        "run's)")
