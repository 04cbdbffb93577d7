"""Files a crash left behind, swept at start-up: they hold patient rows or model weights that
no dataset or model refers to any more.

Three kinds: an upload's spool (``DATA_DIR/.spool-<claim>``, the body as it arrived) that no
dataset's claim holds any more, a patient-id list's (``.patient-ids-*``) and a table being
kept (``.keep-*.tmp``) from a process killed mid-upload; a table kept as sent whose
dataset's transaction never committed (``<sha256>.csv`` / ``.parquet`` no dataset names); and a
model's weights (``ARTIFACT_DIR/<sha256>.pt`` or its ``.tmp``) saved by a worker killed before
its model row committed. Several processes may share the directories, so only what is older
than the longest an upload or a job's last step may take is swept: a live upload's spool, or a
file whose transaction is about to commit, is never touched.
"""

import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.database import get_database
from app.core.settings import settings
from app.datasets.intake.stored import table_path
from app.datasets.models import Dataset
from app.registry.models import TrainedModel

log = logging.getLogger(__name__)

# A kept table or saved model is referenced within seconds of being written; a quarter of an
# hour leaves any transaction in flight alone.
SETTLE_SECONDS = 15 * 60
# <sha256>.csv / .parquet / .pt, or a CSV kept with its dialect in its name
# (<sha256>.delimiter-semicolon.decimal-comma.csv, app.datasets.intake.table_format).
# Spools (``.upload-`` from releases that read the body as it arrived) and tables being kept.
_SPOOLS = (".spool-", ".upload-", ".patient-ids-", ".keep-")
_CONTENT_NAMED = re.compile(r"^[0-9a-f]{64}(\.[a-z]+-[a-z]+)*\.(csv|parquet|pt)$")


@dataclass
class Swept:
    """What a sweep removed, by kind (file names only: they name bytes, not patients)."""

    spools: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)


def _older_than(path: Path, seconds: float, now: float) -> bool:
    try:
        return now - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def _referenced_tables(session: Session) -> set[str]:
    rows = session.scalars(select(Dataset).where(Dataset.table_sha256.is_not(None)))
    return {table_path(dataset).name for dataset in rows}


def _referenced_models(session: Session) -> set[str]:
    return {f"{sha}.pt" for sha in session.scalars(select(TrainedModel.artifact_sha256))}


def sweep(*, session: Session, data_dir: Path | None = None, artifact_dir: Path | None = None,
          now: float | None = None) -> Swept:
    """Remove the orphans of crashed uploads and jobs (see the module docstring)."""
    data_dir, artifact_dir = data_dir or settings.data_dir, artifact_dir or settings.artifact_dir
    now = time.time() if now is None else now
    swept = Swept()
    spool_age = settings.upload_max_seconds + SETTLE_SECONDS
    if data_dir.is_dir():
        tables = _referenced_tables(session)
        claimed = {f".spool-{token}" for token in session.scalars(
            select(Dataset.upload_claim).where(Dataset.upload_claim.is_not(None)))}
        for path in data_dir.iterdir():
            if path.name.startswith(_SPOOLS):
                if path.name not in claimed and _older_than(path, spool_age, now):
                    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
                    swept.spools.append(path.name)
            elif (_CONTENT_NAMED.match(path.name) and path.name not in tables
                  and _older_than(path, SETTLE_SECONDS, now)):
                path.unlink(missing_ok=True)
                swept.tables.append(path.name)
    if artifact_dir.is_dir():
        models = _referenced_models(session)
        for path in artifact_dir.iterdir():
            orphan = (path.suffix == ".tmp" or (_CONTENT_NAMED.match(path.name)
                                               and path.name not in models))
            if orphan and _older_than(path, SETTLE_SECONDS, now):
                path.unlink(missing_ok=True)
                swept.models.append(path.name)
    if swept.spools or swept.tables or swept.models:
        log.warning("swept files a crash left behind", extra={
            "spools": len(swept.spools), "tables": len(swept.tables),
            "models": len(swept.models)})
    return swept


def on_startup() -> None:
    """Sweep once as the service starts; a failure is logged, never fatal (a file left over
    is swept at the next start)."""
    try:
        with get_database().session_scope() as session:
            sweep(session=session)
    except Exception:  # noqa: BLE001
        log.exception("the start-up sweep of orphaned files failed")
