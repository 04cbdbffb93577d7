"""Risk API. Patient features are never logged."""

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from starlette.concurrency import run_in_threadpool

from app.api.scoring_route import ScoringRoute
from app.auth.dependencies import require_roles
from app.auth.models import ROLES
from app.auth.principal import Principal
from app.core.ids import MAX_ID
from app.core.openapi import problems
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.flows import schemas as schema_flow
from app.flows import scoring as scoring_flow
from app.formats import registry as formats
from app.scoring.feature_spec import feature_document
from app.scoring.schemas import (
    TOP_CONTRIBUTIONS,
    BatchView,
    RiskBatchCompact,
    RiskBatchRequest,
    RiskBatchResponse,
    RiskRequest,
    RiskResult,
)

router = APIRouter(tags=["scoring"], route_class=ScoringRoute)
Clinician = Annotated[Principal, require_roles("clinician")]


Accept = Annotated[str | None, Header(description=(
    "the answer's media type: " + ", ".join(f.media_type for f in formats.FORMATS)
    + " (JSON when absent or */*; 406 when none is acceptable)"))]


def _score_one(body: RiskRequest, principal: Principal, chosen: formats.Format) -> bytes:
    answer = scoring_flow.score(request=body, principal=principal)
    return chosen.single(answer) if chosen.single else b""


def _answer(content: bytes, chosen: formats.Format) -> Response:
    """The rendered answer; ``Vary: Accept``, since the media type followed the request's."""
    return Response(content, media_type=chosen.media_type, headers={"Vary": "Accept"})


@router.post("/v1/risk", response_model=RiskResult,
             responses={**problems(404, 409), **formats.openapi_content("single")})
async def score_patient(body: RiskRequest, principal: Clinician, accept: Accept = None
                        ) -> Response:
    """Score one patient: probability, risk band and contributing features."""
    chosen = formats.choose(accept, "single")  # before scoring: a 406 scores nobody
    # The single-patient latency path: one hop to a worker thread (the model may need a
    # database lookup), and the typed answer rendered there (app.formats).
    return _answer(await run_in_threadpool(_score_one, body, principal, chosen), chosen)


@router.post("/v1/risk/batch", response_model=RiskBatchResponse | RiskBatchCompact,
             responses={**problems(404, 409), **formats.openapi_content("batch")})
def score_patients(
    body: RiskBatchRequest, principal: Clinician,
    view: Annotated[BatchView, Query(description=(
        "full: every contribution with its value, reason and severity, and the model and "
        "reference in every result (RiskBatchResponse); compact: probability, band and the "
        f"{TOP_CONTRIBUTIONS} largest contributions per patient (RiskBatchCompact)"))
    ] = BatchView.FULL,
    accept: Accept = None,
) -> Response:
    """Score 1 to 10,000 patients in one call; results in request order."""
    chosen = formats.choose(accept, "batch")
    answer = scoring_flow.score_batch(request=body, principal=principal)
    return _answer(chosen.batch(answer, view) if chosen.batch else b"", chosen)


@router.get("/v1/features", dependencies=[require_roles(*ROLES)], responses=problems(404))
def get_feature_spec(
    model_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    dataset_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> list[dict[str, object]]:
    """A schema's features: names, kinds, public bounds or categories, reference values,
    labels, codes. The named model's (what it scores), the named dataset's, or the active
    model's; with neither named and no model active, the built-in generator's schema."""
    schema = schema_flow.schema_for(model_id=model_id, dataset_id=dataset_id)
    return feature_document(schema or BUILT_IN_SCHEMA)
