"""create_app(): routers, error handlers, and (optionally) the embedded worker's lifespan."""

import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import Depends, FastAPI

from app import health
from app.api.auth import audit_router, keys_router
from app.api.cdshooks import router as cds_hooks_router
from app.api.comparisons import router as comparisons_router
from app.api.datasets import router as datasets_router
from app.api.federation import router as federation_router
from app.api.fhir import router as fhir_router
from app.api.fhir import terminology_router
from app.api.jobs import router as jobs_router
from app.api.ledger import router as ledger_router
from app.api.monitoring import router as monitoring_router
from app.api.patient_budget import router as patient_budget_router
from app.api.privacy_audit import router as privacy_audit_router
from app.api.privacy_inventory import router as privacy_inventory_router
from app.api.registry import router as models_router
from app.api.scoring import router as scoring_router
from app.api.statistics import router as statistics_router
from app.api.uploads import router as uploads_router
from app.auth import service as auth_service
from app.auth.dependencies import AUTH_RESPONSES, authenticate
from app.cdshooks.cors import CdsHooksCors
from app.core.body_limit import install_body_limit
from app.core.docs import install_docs
from app.core.errors import install_error_handlers
from app.core.openapi import install_problem_docs, operation_id
from app.dashboard.router import router as dashboard_router
from app.flows import patient_spaces as patient_spaces_flow
from app.flows import sweep as sweep_flow
from app.flows import upload as upload_flow
from app.jobs.reaper import running_reaper
from app.observability.metrics import install_metrics
from app.observability.request_id import RequestIdMiddleware


def create_app(*, embedded_worker: bool = False, ingest_uploads: bool = False) -> FastAPI:
    """Build the API; with ``embedded_worker`` a worker thread trains jobs and ingests
    uploads in this process; ``ingest_uploads`` alone runs only the ingest loop (an API whose
    tests run jobs by hand still answers ``Prefer: wait`` uploads)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        auth_service.on_startup()  # DPCRISIS_ADMIN_KEY, or a hint when no key exists
        upload_flow.on_startup()  # datasets a dead process left receiving take uploads again
        sweep_flow.on_startup()  # spools, tables and weights a crash left behind
        patient_spaces_flow.on_startup()  # datasets from before patient spaces join theirs
        # Everything loaded so far (modules, torch, the app) lives as long as the process:
        # moved out of the collector's view, a full collection stays short instead of walking
        # the whole start-up heap in the middle of a scoring request (a tail-latency spike).
        gc.freeze()
        # The reaper fails a dead worker's job even when no other worker runs.
        # (Scoring's audit events need no flush here: each is committed before its answer.)
        with running_reaper(), _ingest_loop(ingest_uploads and not embedded_worker):
            if not embedded_worker:
                yield
                return
            from worker.runner import EmbeddedWorker

            runner = EmbeddedWorker()
            runner.start()
            try:
                yield
            finally:
                runner.stop()

    app = FastAPI(
        title="dpcrisis",
        version="0.1.0",
        summary="Differentially private training and scoring of clinical risk models",
        lifespan=lifespan,
        generate_unique_id_function=operation_id,  # createJob, getJobPrivacyReport, ...
        docs_url=None,  # /docs and /redoc without a CDN: app.core.docs
        redoc_url=None,
    )
    install_docs(app)
    install_error_handlers(app)
    install_body_limit(app)  # MAX_REQUEST_BYTES: 413 before a huge body is buffered
    install_metrics(app)  # outside the limit, so refused requests are counted too
    app.add_middleware(CdsHooksCors)  # preflight answers and CORS headers on /cds-services
    app.add_middleware(RequestIdMiddleware)  # outermost: every later layer logs with the id
    app.include_router(health.router)  # probes: no key
    app.include_router(dashboard_router)  # static files: no key (their API calls send one)
    app.include_router(terminology_router)  # FHIR CodeSystems: public definitions, no key
    app.include_router(cds_hooks_router)  # its own authentication: an EHR's JWT, or a key
    # Every other route needs a valid key; each names the roles it admits (app/auth/).
    routers = (datasets_router, ledger_router, patient_budget_router, jobs_router,
               models_router, scoring_router, fhir_router, keys_router, audit_router,
               privacy_audit_router, privacy_inventory_router, statistics_router,
               monitoring_router, comparisons_router, federation_router, uploads_router)
    for router in routers:
        app.include_router(router, dependencies=[Depends(authenticate)],
                           responses=AUTH_RESPONSES)
    install_problem_docs(app)  # errors documented as the problem+json they are
    return app


@contextmanager
def _ingest_loop(run: bool) -> Iterator[None]:
    """The upload ingest loop on a thread of this process while the block runs (if ``run``)."""
    if not run:
        yield
        return
    from worker.ingest import IngestLoop

    loop = IngestLoop().start()
    try:
        yield
    finally:
        loop.stop()
