"""Liveness and readiness probes."""

from typing import Annotated, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import text

from app.core.database import get_database
from app.core.errors import PROBLEM_JSON
from app.privacy.annotations import OPERATIONAL

router = APIRouter(tags=["health"])


class Readiness(BaseModel):
    status: Annotated[Literal["ready"], OPERATIONAL] = "ready"
    schema_version: Annotated[str | None, OPERATIONAL] = Field(
        description="the newest applied Alembic revision")


@router.get("/healthz")
def check_liveness() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness)
def check_readiness() -> Readiness | JSONResponse:
    """The database answers and the schema is at the newest migration."""
    try:
        with get_database().engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:  # noqa: BLE001 - any failure means "not ready"
        return JSONResponse(
            {"type": "about:blank", "title": "Not ready", "status": 503,
             "detail": "database unreachable or not migrated"},
            status_code=503,
            media_type=PROBLEM_JSON,
        )
    return Readiness(schema_version=version)
