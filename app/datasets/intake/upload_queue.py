"""Spooled uploads as a queue: recorded by the API, claimed and finished by a worker.

The claim is one statement, as the job queue's (``app.jobs.queue``): on PostgreSQL
``UPDATE upload ... WHERE id = (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT 1)``, so many
workers never take one upload twice; SQLite serialises the UPDATE itself. An upload whose
ingest outlived its lease (``settings.upload_ingest_lease_seconds``: its worker died) is
claimed again; its ingest commits once or not at all, and a worker that lost its lease
cannot finish it (``finish`` matches its worker id). ``upload_queued`` wakes a worker in
this process at once; other processes poll.
"""

import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.core.time import utcnow
from app.datasets.models import Upload, UploadState

upload_queued = threading.Event()
DONE = frozenset({UploadState.SUCCEEDED, UploadState.FAILED})


class UploadNotFound(NotFound):
    kind, title = "upload-not-found", "Upload not found"


def create(*, session: Session, dataset_id: int, claim: str, spool_path: str, sha256: str,
           media_type: str, size_bytes: int, sent_by: dict[str, Any]) -> Upload:
    """Record a spooled body as a queued upload (the caller commits, then wakes workers)."""
    upload = Upload(dataset_id=dataset_id, state=UploadState.QUEUED, claim=claim,
                    spool_path=spool_path, sha256=sha256, media_type=media_type,
                    size_bytes=size_bytes, sent_by=sent_by, created_at=utcnow())
    session.add(upload)
    session.flush()
    return upload


def get(*, session: Session, upload_id: int) -> Upload:
    """Raises: UploadNotFound."""
    upload = session.get(Upload, upload_id, populate_existing=True)
    if upload is None:
        raise UploadNotFound(f"upload {upload_id} not found", field="upload_id")
    return upload


def claim_next(*, session: Session, worker_id: str, lease_seconds: float) -> Upload | None:
    """Take the oldest queued upload (or one whose ingest's lease ran out), or None."""
    now = utcnow()
    claimable = or_(Upload.state == UploadState.QUEUED,
                    (Upload.state == UploadState.INGESTING) & (Upload.lease_until < now))
    next_id = (select(Upload.id).where(claimable).order_by(Upload.id).limit(1)
               .with_for_update(skip_locked=True).scalar_subquery())
    upload_id = session.execute(
        update(Upload).where(Upload.id == next_id, claimable)
        .values(state=UploadState.INGESTING, worker_id=worker_id,
                lease_until=now + timedelta(seconds=lease_seconds))
        .returning(Upload.id).execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    return None if upload_id is None else get(session=session, upload_id=upload_id)


def finish(*, session: Session, upload_id: int, worker_id: str, state: UploadState,
           problem: dict[str, Any] | None = None) -> bool:
    """End an upload this worker holds; False when its lease was lost to another worker."""
    assert state in DONE
    held = session.scalar(select(Upload).where(
        Upload.id == upload_id, Upload.worker_id == worker_id,
        Upload.state == UploadState.INGESTING).with_for_update())
    if held is None:
        return False
    held.state, held.problem = state, problem
    held.finished_at, held.lease_until = utcnow(), None
    return True


def spools_in_use(*, session: Session) -> set[str]:
    """The spool files of uploads not yet finished (never swept)."""
    return set(session.scalars(select(Upload.spool_path).where(Upload.state.not_in(DONE))))
