"""Request and response bodies of the statistics API (``POST /v1/datasets/{id}/statistics``).

A request is a list of queries and one privacy target; the whole list is one release. Field
shapes are checked here (pydantic); the rules that need the dataset's declared schema (which
feature, which bins, how many cells) are checked by ``app.statistics.plan``. Each response
field names the kinds of release it is made of (``Released``, the release inventory).
"""

from typing import Annotated, Any

from pydantic import Field

from app.core.plugins import Registered
from app.core.schemas import (
    Page,
    PrivacyNumber,
    RequestModel,
    ResponseModel,
    UtcDatetime,
    register_ranges,
)
from app.privacy.annotations import LEDGER, PUBLIC, Released
from app.privacy.mechanisms import GAUSSIAN
from app.privacy.releases import Release

MAX_QUERIES = 50
MAX_CELLS = 10_000
MAX_BY = 4
MAX_EDGES = 201  # 200 bins
MIN_EPSILON, MAX_EPSILON = 0.001, 100.0
MIN_WEIGHT, MAX_WEIGHT = 0.001, 1000.0

ROWS = Released(Release.PUBLIC_BY_CONVENTION)
NOISE_NOTE = "the noise's parameters: functions of the request and the declared bounds"
NOISE_PUBLIC = Released(Release.PUBLIC_INPUT, note=NOISE_NOTE)
NOISE_LEDGER = Released(Release.LEDGER, note=NOISE_NOTE)
CELL_KEY = Released(Release.PUBLIC_INPUT, note="group keys and bins come from the schema and "
                    "the request, never the data")
NOISY = Released(Release.DP_STATISTICS, note="a noisy value; a ratio's error and interval are "
                 "computed from the noisy vectors (post-processing)")

ColumnName = Annotated[str, Field(min_length=1, max_length=64)]


QUERY_KINDS = Registered("QueryKind")
"""The kinds a query may name: ``app.statistics.queries`` provides them."""
QueryKind = Annotated[str, QUERY_KINDS]
NOISE_MECHANISMS = Registered(
    "NoiseMechanism",
    "The additive noise a one-shot release draws (statistics, held-out releases).")
"""The mechanisms a release may name: ``app.statistics.mechanisms`` provides them."""
NoiseMechanism = Annotated[str, NOISE_MECHANISMS]


Edges = Annotated[list[float], Field(min_length=2, max_length=MAX_EDGES)]


class BinnedColumn(RequestModel):
    """Group by a numeric feature cut at public edges: bins [e0, e1), ..., [e(k-1), ek]."""

    feature: ColumnName
    bins: Edges


class StatisticQuery(RequestModel):
    """One query; ``by`` names binary or categorical columns, or numeric ones with bins."""

    kind: QueryKind
    feature: ColumnName | None = Field(
        default=None, description="sum, mean and histogram: the column (absent otherwise)")
    bins: Edges | None = Field(
        default=None, description="histogram of a numeric column: public, increasing edges "
        "within its declared bounds (an integer column may end at upper + 1)")
    by: list[ColumnName | BinnedColumn] = Field(default_factory=list, max_length=MAX_BY)
    weight: float = Field(
        default=1.0, ge=MIN_WEIGHT, le=MAX_WEIGHT,
        description="this query's share of the privacy target, relative to the others")


class StatisticsPrivacy(RequestModel):
    """The release's target: (epsilon, delta) for Gaussian noise, pure epsilon for Laplace."""

    epsilon: PrivacyNumber = Field(ge=MIN_EPSILON, le=MAX_EPSILON)
    delta: PrivacyNumber | None = Field(
        default=None, gt=0, lt=1,
        description="Gaussian only; default: the dataset's budget delta")
    mechanism: NoiseMechanism = GAUSSIAN


@register_ranges
class StatisticsCreate(RequestModel):
    queries: list[StatisticQuery] = Field(min_length=1, max_length=MAX_QUERIES)
    privacy: StatisticsPrivacy


class NoiseOut(ResponseModel):
    """One noisy vector of an answer: what it counts or sums, and the noise added to it."""

    of: Annotated[str, NOISE_PUBLIC] = Field(
        description="what the vector holds, e.g. counts, or clipped sums")
    cells: Annotated[int, NOISE_PUBLIC]
    distribution: Annotated[str, NOISE_PUBLIC] = Field(description="gaussian or laplace")
    scale: Annotated[float, NOISE_LEDGER] = Field(
        description="noise standard deviation (gaussian) or scale b (laplace)")
    sensitivity: Annotated[float, NOISE_PUBLIC] = Field(
        description="the vector's L2 (gaussian) or L1 (laplace) sensitivity under adding or "
        "removing one record")
    norm: Annotated[str, NOISE_PUBLIC] = Field(description="l2 or l1")
    rho: Annotated[float | None, NOISE_LEDGER] = Field(
        description="zCDP of this vector (gaussian), by OpenDP's map")
    epsilon: Annotated[float | None, NOISE_LEDGER] = Field(
        description="pure epsilon of this vector (laplace), by OpenDP's map")
    sampler: Annotated[str, NOISE_PUBLIC] = Field(
        description="the library measurement that drew the noise")


class CellOut(ResponseModel):
    """One answered cell: the noisy value, its standard error and a 95% interval."""

    group: Annotated[dict[str, str], CELL_KEY] = Field(
        description="the cell's group, column -> label ({}: all)")
    bin: Annotated[str | None, CELL_KEY] = Field(
        description="a histogram's bin or category (null otherwise)")
    value: Annotated[float, NOISY]
    standard_error: Annotated[float, NOISY] = Field(
        description="of the DP noise (against the exact value on these rows), not of sampling")
    ci95: Annotated[list[float], NOISY] = Field(
        description="[low, high]: a 95% interval of the exact value")


class AnswerOut(ResponseModel):
    """One query's answer."""

    index: Annotated[int, PUBLIC]
    kind: Annotated[QueryKind, PUBLIC]
    feature: Annotated[str | None, PUBLIC]
    bins: Annotated[list[float] | None, PUBLIC]
    by: Annotated[list[str | dict[str, Any]], PUBLIC]
    share: Annotated[float, PUBLIC] = Field(
        description="this query's fraction of the release's privacy")
    estimator: Annotated[str, PUBLIC]
    noise: list[NoiseOut]
    cells: list[CellOut]


class ReleasePrivacyOut(ResponseModel):
    """The release's mechanism and what it charged the dataset's ledger."""

    mechanism: Annotated[NoiseMechanism, PUBLIC]
    target_epsilon: Annotated[float, PUBLIC]
    delta: Annotated[float | None, PUBLIC] = Field(description="null: pure epsilon-DP (Laplace)")
    epsilon: Annotated[float | None, LEDGER] = Field(
        description="the release's own epsilon (Gaussian: exact at delta; Laplace: pure), at "
        "most the target")
    epsilon_rdp: Annotated[float | None, LEDGER]
    noise_multiplier: Annotated[float, LEDGER] = Field(
        description="the charged equivalent (Gaussian: the composed multiplier; Laplace: "
        "1 / epsilon)")
    ledger_entry_id: Annotated[int | None, LEDGER]
    statement: Annotated[str, Released(Release.LEDGER, Release.PUBLIC_BY_CONVENTION)]


class StatisticsReleaseOut(ResponseModel):
    id: Annotated[int, PUBLIC]
    dataset_id: Annotated[int, PUBLIC]
    created_at: Annotated[UtcDatetime, PUBLIC]
    rows: Annotated[int, ROWS] = Field(
        description="the records the release covers: all of the dataset's")
    library: Annotated[str, PUBLIC]
    privacy: ReleasePrivacyOut
    answers: list[AnswerOut]


class StatisticsPage(Page[StatisticsReleaseOut]):
    pass
