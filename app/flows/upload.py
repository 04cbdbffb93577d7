"""An upload's steps across domains: claim the dataset, receive the rows with no session held,
then accept them with their audit event in one short transaction (or give the claim back).

The route calls these; a database connection is taken only for the claim and for the accept,
never while the body arrives, so slow clients cannot exhaust the pool that scoring needs.
"""

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.core.database import get_database
from app.datasets import claims, uploads
from app.datasets.claims import ClaimedUpload
from app.datasets.encoding import encoder_for
from app.datasets.models import Dataset
from app.datasets.uploads import ReceivedUpload
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
    """Keep the rows and record who sent them, in one transaction.

    Raises:
        DatasetTooSmall: fewer rows than any job could use (``size_floor.upload_floor``: the
            row count is public by convention), before a session is taken (nothing stored).
        UploadInProgress, DatasetAlreadyRegistered: as ``uploads.accept`` (nothing stored).
    """
    size_floor.check_upload(rows=received.upload.n_rows,
                            inputs=encoder_for(received.claimed.schema).n_inputs)
    with get_database().session_scope() as session:
        dataset = uploads.accept(session=session, received=received)
        audit.record(session=session, principal=principal, action=Action.DATA_UPLOADED,
                     target=f"dataset/{dataset.id}",
                     detail={"rows": dataset.n_rows, "imputed": dataset.imputed,
                             "table_sha256": dataset.table_sha256})
        return dataset
