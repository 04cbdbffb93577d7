"""Risk API. Patient features are never logged."""

from typing import Any

from fastapi import APIRouter

from app.core.database import SessionDep
from app.features import spec_document
from app.scoring import service
from app.scoring.schemas import RiskRequest

router = APIRouter(tags=["scoring"])


@router.post("/v1/risk")
def score_patient(body: RiskRequest, session: SessionDep) -> dict[str, Any]:
    """Score one patient: probability, risk band and contributing features."""
    return service.score(
        session=session, features=body.features.model_dump(), model_id=body.model_id
    )


@router.get("/v1/features")
def feature_spec() -> list[dict[str, object]]:
    """The feature spec: names, public bounds, reference values, labels."""
    return spec_document()
