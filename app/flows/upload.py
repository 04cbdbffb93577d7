"""An upload's steps across domains: claim the dataset, receive the rows with no session held,
then accept them with their audit event in one short transaction (or give the claim back).

The route calls these; a database connection is taken only for the claim and for the accept,
never while the body arrives, so slow clients cannot exhaust the pool that scoring needs.
"""

from typing import Any

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.core.database import get_database
from app.datasets import claims, patient_index, uploads
from app.datasets.claims import ClaimedUpload
from app.datasets.encoding import encoder_for
from app.datasets.models import Dataset
from app.datasets.uploads import ReceivedUpload
from app.flows import index_upkeep
from app.jobs import size_floor


def claim(*, dataset_id: int) -> ClaimedUpload:
    """Claim the dataset for this upload and commit at once (see ``claims.claim``)."""
    with get_database().session_scope() as session:
        return claims.claim(session=session, dataset_id=dataset_id)


def give_back(*, claimed: ClaimedUpload) -> None:
    """The upload failed: the dataset awaits its data again."""
    with get_database().session_scope() as session:
        claims.give_back(session=session, claimed=claimed)


def accept(*, received: ReceivedUpload, principal: Principal) -> Dataset:
    """Keep the rows and record who sent them, in one transaction; then (committed) queue the
    fold of the space's patient index (``index_upkeep``), which the client does not wait for.

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
        dataset = uploads.accept(session=session, received=received)
        detail: dict[str, Any] = {"rows": dataset.n_rows, "imputed": dataset.imputed,
                                  "table_sha256": dataset.table_sha256}
        keyed_into = None
        if dataset.patient_space_id is not None and dataset.source_kind == "upload":
            # the organisation's space (one registered before spaces joined it at its claim)
            keyed_into = dataset.patient_space_id
            overlap = patient_index.add_dataset(
                session=session, space_id=keyed_into, dataset_id=dataset.id,
                ids=received.upload.ids, keyed=keyed, ahead=received.ahead)
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
