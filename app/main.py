"""create_app(): routers, error handlers, and (optionally) the embedded worker's lifespan."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import health
from app.cdshooks.router import router as cds_hooks_router
from app.core.errors import install_error_handlers
from app.dashboard.router import router as dashboard_router
from app.datasets.router import router as datasets_router
from app.fhir.router import router as fhir_router
from app.jobs.router import router as jobs_router
from app.ledger.router import router as ledger_router
from app.observability.metrics import install_metrics
from app.registry.router import router as models_router
from app.scoring.router import router as scoring_router


def create_app(*, embedded_worker: bool = False) -> FastAPI:
    """Build the API; with ``embedded_worker`` a worker thread trains jobs in this process."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
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
        summary="Differentially private training and scoring of 30-day crisis risk",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    install_metrics(app)
    routers = (health.router, datasets_router, ledger_router, jobs_router, models_router,
               scoring_router, fhir_router, cds_hooks_router)
    for router in routers:
        app.include_router(router)
    app.include_router(dashboard_router)
    return app
