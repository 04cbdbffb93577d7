"""Risk API. Patient features are never logged."""

from typing import Annotated

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from app.api.scoring_route import ScoringRoute
from app.auth.dependencies import require_roles
from app.auth.models import ROLES
from app.auth.principal import Principal
from app.core.ids import MAX_ID
from app.core.openapi import problems
from app.datasets.built_in_schema import BUILT_IN_SCHEMA
from app.flows import schemas as schema_flow
from app.flows import scoring as scoring_flow
from app.scoring import render
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


def _score_one(body: RiskRequest, principal: Principal) -> bytes:
    return render.answer_json(scoring_flow.score(request=body, principal=principal))


@router.post("/v1/risk", response_model=RiskResult, responses=problems(404, 409))
async def score_patient(body: RiskRequest, principal: Clinician) -> Response:
    """Score one patient: probability, risk band and contributing features."""
    # The single-patient latency path: one hop to a worker thread (the model may need a
    # database lookup), and the typed answer written to JSON there (app.scoring.render).
    content = await run_in_threadpool(_score_one, body, principal)
    return Response(content, media_type="application/json")


@router.post("/v1/risk/batch", response_model=RiskBatchResponse | RiskBatchCompact,
             responses=problems(404, 409))
def score_patients(
    body: RiskBatchRequest, principal: Clinician,
    view: Annotated[BatchView, Query(description=(
        "full: every contribution with its value, reason and severity, and the model and "
        "reference in every result (RiskBatchResponse); compact: probability, band and the "
        f"{TOP_CONTRIBUTIONS} largest contributions per patient (RiskBatchCompact)"))
    ] = BatchView.FULL,
) -> Response:
    """Score 1 to 10,000 patients in one call; results in request order."""
    answer = scoring_flow.score_batch(request=body, principal=principal)
    write = render.compact_json if view is BatchView.COMPACT else render.batch_json
    return Response(write(answer), media_type="application/json")


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
