"""Uploads API: a spooled upload's state and, once ingested, its answer."""

from typing import Annotated

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from app.api.datasets import upload_view
from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.ids import UploadIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.datasets.schemas import UploadOut
from app.flows import upload as upload_flow

router = APIRouter(prefix="/v1/uploads", tags=["datasets"], route_class=JsonRoute)


@router.get("/{upload_id}", responses=problems(404))
async def get_upload(
    upload_id: UploadIdPath, principal: Annotated[Principal, require_roles("data_steward")],
) -> UploadOut:
    """Read an upload: queued, ingesting, or done with its dataset or its problem."""
    upload, dataset = await run_in_threadpool(upload_flow.view, upload_id=upload_id)
    return upload_view(upload, dataset, principal)
