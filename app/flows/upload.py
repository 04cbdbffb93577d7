"""An upload's steps across domains: the API claims the dataset, spools the body and queues
the upload (``claim``, ``renew``, ``queue``); a worker ingests it (``ingest``: validate, key
the ids, update the patient index, blocks and chain, in one transaction with the audit event),
or the claim is given back. A database connection is taken only for short transactions,
never while the body arrives or the table is read, so slow clients and large tables cannot
exhaust the pool that scoring needs.
"""

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.core.database import get_database
from app.core.errors import DomainError, problem_body
from app.core.settings import settings
from app.datasets import claims, service, uploads
from app.datasets.claims import ClaimedUpload, UploadInProgress
from app.datasets.intake import projection, upload_queue
from app.datasets.intake.spool import Spooled
from app.datasets.models import Dataset, Upload, UploadState
from app.datasets.patients import patient_index
from app.datasets.schema.encoding import encoder_for
from app.datasets.uploads import ReceivedUpload
from app.flows import index_upkeep
from app.jobs import size_floor

log = logging.getLogger(__name__)


def spool_path(token: str) -> Path:
    """Where the body of the upload claimed under ``token`` is spooled."""
    return settings.data_dir / f".spool-{token}"


def claim(*, dataset_id: int) -> ClaimedUpload:
    """Claim the dataset for this upload and commit at once (see ``claims.claim``)."""
    with get_database().session_scope() as session:
        return claims.claim(session=session, dataset_id=dataset_id)


def renew(*, claimed: ClaimedUpload) -> None:
    """The body is still arriving: renew the claim's lease."""
    with get_database().session_scope() as session:
        claims.renew(session=session, dataset_id=claimed.dataset_id, token=claimed.token)


def give_back(*, claimed: ClaimedUpload) -> None:
    """The upload failed: the dataset awaits its data again, and its spool goes."""
    with get_database().session_scope() as session:
        claims.give_back(session=session, claimed=claimed)
    spool_path(claimed.token).unlink(missing_ok=True)


def queue(*, claimed: ClaimedUpload, spooled: Spooled, media_type: str,
          principal: Principal) -> int:
    """Record the spooled body as a queued upload holding the dataset's claim; its id.

    Raises:
        UploadInProgress: the claim went stale and was taken over meanwhile (409).
    """
    with get_database().session_scope() as session:
        if not claims.queue(session=session, dataset_id=claimed.dataset_id,
                            token=claimed.token):
            raise UploadInProgress(f"dataset {claimed.dataset_id}'s upload claim expired "
                                   "before its body was recorded; send it again",
                                   field="dataset_id")
        upload = upload_queue.create(
            session=session, dataset_id=claimed.dataset_id, claim=claimed.token,
            spool_path=str(spool_path(claimed.token)), sha256=spooled.sha256,
            media_type=media_type, size_bytes=spooled.size, sent_by=asdict(principal))
        upload_id = upload.id
    upload_queue.upload_queued.set()
    return upload_id


def view(*, upload_id: int) -> tuple[Upload, Dataset | None]:
    """The upload and, once it succeeded, its dataset (detached, read in one session)."""
    with get_database().session_scope() as session:
        upload = upload_queue.get(session=session, upload_id=upload_id)
        dataset = (service.get(session=session, dataset_id=upload.dataset_id)
                   if upload.state == UploadState.SUCCEEDED else None)
        session.expunge_all()
    return upload, dataset


def ingest(*, upload: Upload, worker_id: str) -> UploadState | None:
    """Validate and keep a claimed upload's spooled table (the dataset becomes ``ready``), or
    record its problem and give the dataset back; the spool goes either way. None when the
    upload's lease was lost to another worker (nothing changes here)."""
    with get_database().session_scope() as session:
        dataset = service.get(session=session, dataset_id=upload.dataset_id)
        claimed = claims.claimed_upload(session=session, dataset=dataset, token=upload.claim)
    instance = f"/v1/datasets/{upload.dataset_id}/data"
    state: UploadState | None
    try:
        received = uploads.receive(claimed=claimed, path=Path(upload.spool_path),
                                   media_type=upload.media_type, sha256=upload.sha256)
        if accept(received=received, principal=Principal(**upload.sent_by),
                  upload_id=upload.id, worker_id=worker_id) is None:
            return None
        state = UploadState.SUCCEEDED
    except DomainError as exc:
        state = _failed(upload, worker_id, claimed, problem_body(exc, instance))
    except Exception:  # noqa: BLE001 - a bug: the upload fails as a 500 would have
        log.exception("upload %s: ingest failed", upload.id)
        state = _failed(upload, worker_id, claimed, {
            "type": "https://dpcrisis.dev/problems/internal-error", "title": "Internal error",
            "status": 500, "detail": "the upload could not be ingested; nothing was stored",
            "instance": instance})
    if state is not None:
        Path(upload.spool_path).unlink(missing_ok=True)
        projection.projected_path(Path(upload.spool_path)).unlink(missing_ok=True)
    return state


def _failed(upload: Upload, worker_id: str, claimed: ClaimedUpload,
            problem: dict[str, Any]) -> UploadState | None:
    with get_database().session_scope() as session:
        if not upload_queue.finish(session=session, upload_id=upload.id, worker_id=worker_id,
                                   state=UploadState.FAILED, problem=problem):
            return None
        claims.give_back(session=session, claimed=claimed)
    return UploadState.FAILED


def accept(*, received: ReceivedUpload, principal: Principal, upload_id: int | None = None,
           worker_id: str = "") -> Dataset | None:
    """Keep the rows, record who sent them and finish the upload, in one transaction; then
    (committed) queue the fold of the space's patient index (``index_upkeep``). None (nothing
    kept) when the upload's lease was lost to another worker.

    Raises:
        DatasetTooSmall: fewer rows than any job could use (``size_floor.upload_floor``: the
            row count is public by convention), before a session is taken (nothing stored).
        UploadInProgress, DatasetAlreadyRegistered: as ``uploads.accept`` (nothing stored).
    """
    size_floor.check_upload(rows=received.upload.n_rows,
                            inputs=encoder_for(received.claimed.schema).n_inputs)
    claimed = received.claimed
    keyed = patient_index.Keyed.of(claimed.patient_secret, received.upload.patient_words,
                                   scheme=claimed.patient_scheme)
    with get_database().session_scope() as session:
        if upload_id is not None and not upload_queue.finish(
                session=session, upload_id=upload_id, worker_id=worker_id,
                state=UploadState.SUCCEEDED):
            return None
        dataset = uploads.accept(session=session, received=received)
        detail: dict[str, Any] = {"rows": dataset.n_rows, "imputed": dataset.imputed,
                                  "table_sha256": dataset.table_sha256}
        keyed_into = None
        if dataset.patient_space_id is not None and dataset.source_kind == "upload":
            # the organisation's space (one registered before spaces joined it at its claim)
            keyed_into = dataset.patient_space_id
            overlap = patient_index.add_dataset(
                session=session, space_id=keyed_into, dataset_id=dataset.id,
                ids=received.upload.ids, keyed=keyed)
            dataset.patient_overlap = overlap.as_json()
            # Always present (null or an id), so that even which member is withheld from
            # others says nothing of a re-upload.
            detail["patients"] = {**dataset.patient_overlap,
                                  "rows_equal_dataset": dataset.rows_equal_dataset_id}
        audit.record(session=session, principal=principal, action=Action.DATA_UPLOADED,
                     target=f"dataset/{dataset.id}", detail=detail)
    if keyed_into is not None:  # committed: the index's fold and old files, off the request
        index_upkeep.after_upload(space_id=keyed_into)
    return dataset


def on_startup() -> None:
    """Give back the claims of bodies a dead process never finished (their lease ran out),
    and delete their spools: their datasets take a new upload, or a delete, again."""
    with get_database().session_scope() as session:
        tokens = claims.give_back_stale(session=session)
    for token in tokens:
        spool_path(token).unlink(missing_ok=True)
    if tokens:
        log.warning("gave back %d upload claim(s) a stopped process left", len(tokens))
