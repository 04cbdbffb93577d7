"""Datasets API: thin routes over app.datasets.service and the flows that cross domains
(app.flows.datasets, app.flows.upload)."""

import asyncio
import logging
import tempfile
import time
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.requests import ClientDisconnect

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core import prefer as prefer_header
from app.core.database import SessionDep, get_database
from app.core.errors import PROBLEM_JSON, UnsupportedMediaType
from app.core.idempotency import IdempotencyKey, create_once, replay_headers
from app.core.ids import DatasetIdPath
from app.core.json_body import JsonRoute
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.openapi import problems
from app.core.pagination import Limit, Offset
from app.core.settings import settings
from app.datasets import service
from app.datasets.claims import ClaimedUpload
from app.datasets.intake import table_format, upload_queue
from app.datasets.intake.ingest import media_type_of
from app.datasets.intake.spool import Pace, Spooled, spool
from app.datasets.intake.table_format import CSV
from app.datasets.models import Dataset, Upload
from app.datasets.patients import patient_ids
from app.datasets.schemas import (
    DatasetCreate,
    DatasetOut,
    DatasetPage,
    PrivacyBudget,
    UploadOut,
)
from app.flows import datasets as dataset_flow
from app.flows import patient_spaces
from app.flows import upload as upload_flow
from app.reports import privacy_html as report_html
from app.reports.html import negotiated
from app.reports.schemas import DatasetPrivacyReport

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=JsonRoute)
# Data stewards hold the tables (docs/privacy.md, "What each role can learn"): they alone (and
# admins) register datasets, send and erase rows, and read what is exact about the rows.
# Registration is theirs for every source, synthetic too: its seed regenerates every row, and a
# registration's 409 for a source registered already answers from another dataset's identity
# (an equality oracle).
STEWARDS = require_roles("data_steward")
READERS = require_roles("data_steward", "data_scientist", "privacy_officer")
# Roles that see a dataset's exact intake facts: a synthetic source's seed (it regenerates
# every row) and an upload's imputed counts. None: the CLI and the service itself.
SEED_READERS = frozenset({"admin", "data_steward", None})


def _out(dataset: Dataset, principal: Principal) -> DatasetOut:
    """The dataset as ``principal`` may see it: intake facts only for ``SEED_READERS``."""
    holder = principal.role in SEED_READERS
    return DatasetOut.from_orm_row(dataset, show_seed=holder, show_intake=holder)


@router.post("", status_code=status.HTTP_201_CREATED, responses=problems(409))
def create_dataset(
    body: DatasetCreate, session: SessionDep, response: Response,
    principal: Annotated[Principal, STEWARDS],
    idempotency_key: IdempotencyKey = None,
) -> DatasetOut:
    """Register a dataset with its privacy budget (``Idempotency-Key`` makes retries safe)."""
    dataset_id, replayed = create_once(
        session=session, owner=principal.key_id, route="POST /v1/datasets", key=idempotency_key,
        body=body,
        create=lambda: dataset_flow.register(session=session, request=body,
                                             principal=principal),
    )
    response.headers.update(replay_headers(replayed))
    response.headers["Location"] = f"/v1/datasets/{dataset_id}"
    return _out(service.get(session=session, dataset_id=dataset_id), principal)


@router.get("")
def list_datasets(
    session: SessionDep, principal: Annotated[Principal, READERS],
    limit: Limit = 50, offset: Offset = 0,
) -> DatasetPage:
    """List datasets."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    return DatasetPage(items=[_out(d, principal) for d in rows], total=total,
                       limit=limit, offset=offset)


@router.get("/{dataset_id}")
def get_dataset(
    dataset_id: DatasetIdPath, session: SessionDep, principal: Annotated[Principal, READERS],
) -> DatasetOut:
    """Read one dataset (intake facts, such as the seed, only for admins and data stewards)."""
    return _out(service.get(session=session, dataset_id=dataset_id), principal)


@router.put(
    "/{dataset_id}/data", status_code=status.HTTP_202_ACCEPTED, response_model=UploadOut,
    responses={200: {"model": DatasetOut, "description": "with `Prefer: wait=N`: the "
                     "upload was ingested in time, the dataset is ready"},
               **problems(408, 409, 413, 415, 422)},
    openapi_extra={"requestBody": {"required": True, "content": {
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"},
                                     "description": "a Parquet file, told by its bytes"},
    }}},
)
async def put_dataset_data(
    dataset_id: DatasetIdPath, request: Request,
    principal: Annotated[Principal, require_roles("data_steward")],
    prefer: Annotated[str | None, Header(description="`wait=N`: answer as the ingest does "
                                                     "if it ends within N seconds")] = None,
) -> JSONResponse:
    """Send an upload's rows (CSV with a header row, or Parquet), all or nothing: 202 with
    the upload (``Location``), which a worker ingests; with ``Prefer: wait=N``, 200 with the
    dataset now ``ready`` (or the 4xx problem) if it ends in time."""
    content_type = request.headers.get("content-type", "")
    if not table_format.by_content(content_type):
        content_type = media_type_of(content_type).content_type  # 415 before the body
    claimed = await run_in_threadpool(upload_flow.claim, dataset_id=dataset_id)
    try:
        spooled = await _spool(request, claimed)
        content_type = table_format.format_of_body(  # 415: octet-stream that is no Parquet
            content_type, upload_flow.spool_path(claimed.token)).content_type
        upload_id = await run_in_threadpool(upload_flow.queue, claimed=claimed,
                                            spooled=spooled, media_type=content_type,
                                            principal=principal)
    except BaseException:  # nothing was kept: the dataset awaits its data again
        await asyncio.shield(run_in_threadpool(upload_flow.give_back, claimed=claimed))
        raise
    wait = prefer_header.wait_seconds(prefer, cap=settings.upload_max_wait_seconds)
    return await _answer(upload_id, wait, principal)


async def _spool(request: Request, claimed: ClaimedUpload) -> Spooled:
    """The body, spooled under the data directory with its guards; the claim renewed."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)

    async def renew() -> None:
        await run_in_threadpool(upload_flow.renew, claimed=claimed)

    try:
        return await spool(request.stream(), upload_flow.spool_path(claimed.token),
                           max_bytes=settings.max_upload_bytes, pace=_pace(), renew=renew,
                           renew_seconds=settings.upload_claim_lease_seconds / 3)
    except ClientDisconnect:  # the client's choice, not our error
        log.info("an upload's client went away mid-body; nothing was kept")
        raise HTTPException(400, "the client went away before the body ended") from None


def _pace() -> Pace:
    return Pace(settings.upload_min_bytes_per_second, settings.upload_grace_seconds,
                settings.upload_max_seconds)


async def _answer(upload_id: int, wait: float | None, principal: Principal) -> JSONResponse:
    """202 with the upload; with a ``wait``, the ingest's own answer if it ends in time."""
    deadline, pause = time.monotonic() + (wait or 0.0), 0.02
    while True:
        upload, dataset = await run_in_threadpool(upload_flow.view, upload_id=upload_id)
        left = deadline - time.monotonic()
        if wait is None or upload.state in upload_queue.DONE or left <= 0:
            break
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)
    headers = {} if wait is None else prefer_header.applied(wait)
    if wait is not None and dataset is not None:
        return JSONResponse(jsonable_encoder(_out(dataset, principal)), headers=headers)
    if wait is not None and upload.problem is not None:
        return JSONResponse(upload.problem, status_code=upload.problem["status"],
                            media_type=PROBLEM_JSON, headers=headers)
    headers["Location"] = f"/v1/uploads/{upload_id}"
    return JSONResponse(jsonable_encoder(upload_view(upload, dataset, principal)),
                        status_code=status.HTTP_202_ACCEPTED, headers=headers)


def upload_view(upload: Upload, dataset: Dataset | None, principal: Principal) -> UploadOut:
    """The upload's resource, its dataset as ``principal`` may see it."""
    return UploadOut.from_row(upload, dataset=None if dataset is None
                              else _out(dataset, principal))


@router.put(
    "/{dataset_id}/patient-ids", responses=problems(408, 409, 413, 415, 422),
    openapi_extra={"requestBody": {"required": True, "content": {
        "text/csv": {"schema": {"type": "string"}}}}},
)
async def declare_patient_ids(
    dataset_id: DatasetIdPath, request: Request,
    principal: Annotated[Principal, require_roles("data_steward")],
) -> DatasetOut:
    """Declare the patient id of each row of an upload registered before patient spaces
    without an id column (CSV: a header row, then one id per stored row, in order): its
    patients join the organisation's space with the spend they had, and it takes releases
    again. All or nothing; a bad list is a 422 naming rows."""
    if media_type_of(request.headers.get("content-type", "")).media_type != CSV:
        raise UnsupportedMediaType("the patient ids are read as text/csv (one column)",
                                   field="Content-Type", allowed="text/csv")
    database = get_database()
    n_rows = await run_in_threadpool(patient_spaces.rows_awaiting_ids, database=database,
                                     dataset_id=dataset_id)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.data_dir, prefix=".patient-ids-") as tmp:
        body = Path(tmp) / "body"
        await spool(request.stream(), body, max_bytes=patient_ids.max_body_bytes(n_rows),
                    pace=_pace())
        dataset = await run_in_threadpool(patient_spaces.declare_ids, database=database,
                                          dataset_id=dataset_id, body=body,
                                          principal=principal)
    return _out(dataset, principal)


@router.delete("/{dataset_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses=problems(409))
def delete_dataset(
    dataset_id: DatasetIdPath, session: SessionDep, principal: Annotated[Principal, STEWARDS],
) -> None:
    """Delete a registration that never received rows (409 once it has or had any)."""
    dataset_flow.withdraw(session=session, dataset_id=dataset_id, principal=principal)


@router.delete("/{dataset_id}/data", responses=problems(404))
def erase_dataset_data(
    dataset_id: DatasetIdPath, session: SessionDep, principal: Annotated[Principal, STEWARDS],
) -> DatasetOut:
    """Erase the rows and their per-record secrets; the ledger, models and reports stay."""
    dataset = dataset_flow.erase_data(session=session, dataset_id=dataset_id,
                                      principal=principal)
    return _out(dataset, principal)


@router.put("/{dataset_id}/privacy-budget", responses=problems(409))
def change_privacy_budget(
    dataset_id: DatasetIdPath, body: PrivacyBudget, session: SessionDep,
    principal: Annotated[Principal, require_roles()],
) -> DatasetOut:
    """Raise or lower a dataset's budget (admin); 409 if it would fall below what is spent."""
    dataset = dataset_flow.change_budget(session=session, dataset_id=dataset_id, budget=body,
                                         principal=principal)
    return _out(dataset, principal)


@router.get("/{dataset_id}/privacy-report", response_model=DatasetPrivacyReport,
            response_class=JSONResponse, responses=REPORT_RESPONSES)
def get_dataset_privacy_report(
    dataset_id: DatasetIdPath, session: SessionDep, html: PrefersHtml, request: Request,
    response: Response, principal: Annotated[Principal, READERS],
) -> DatasetPrivacyReport | HTMLResponse:
    """Budget, composed spend, remaining budget and the ledger entries (JSON or HTML page)."""
    report = dataset_flow.privacy_report(session=session, dataset_id=dataset_id,
                                         principal=principal)
    root_path = request.scope.get("root_path", "")
    return negotiated(report, html=html, response=response,
                      render=lambda r: report_html.render_dataset_page(r, root_path=root_path))
