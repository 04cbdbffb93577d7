"""Registration rules shared by synthetic sources and uploads: delta against the row count,
and data identity (no second budget for registered data: a source registered again is refused,
unless it is a private re-upload whose patients share their spend in the organisation's
patient space)."""

import hashlib

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.core.errors import Conflict, InvalidRequest
from app.datasets.models import Dataset

# delta must be at most 1 / (DELTA_ROWS_FACTOR * n_rows): at delta near 1/n, "publish one
# random record in full" satisfies (0, delta)-DP, so a delta that large protects nobody.
DELTA_ROWS_FACTOR = 10


class DatasetAlreadyRegistered(Conflict):
    kind, title = "dataset-already-registered", "This source is already registered"


def upload_fingerprint(content: str) -> str:
    """An upload's source identity, from its order-insensitive content fingerprint."""
    return hashlib.sha256(f"upload:v1:{content}".encode()).hexdigest()


def shared_fingerprint(fingerprint: str, dataset_id: int) -> str:
    """The source identity of a table whose rows equal an earlier private upload's in the
    organisation's patient space (its patients share their spend, ``check_new_source``): the
    unique column keeps the earlier dataset's identity, so this one is derived from the same
    content and its own id, and its stored table is still checked against its content."""
    return hashlib.sha256(f"shared:v1:{dataset_id}:{fingerprint}".encode()).hexdigest()


def source_identity(dataset: Dataset, content: str) -> str:
    """The identity ``dataset`` records for a table of this content fingerprint."""
    fingerprint = upload_fingerprint(content)
    if dataset.rows_equal_dataset_id is None:
        return fingerprint
    return shared_fingerprint(fingerprint, dataset.id)


def check_new_source(session: Session, *fingerprints: str,
                     patient_space_id: int | None = None) -> int | None:
    """Refuse a source that is already registered where a second registration would be a
    second budget for the same patients; name the earlier dataset where it would not.

    ``fingerprints``: the source's identities (an upload's content; a generator's (size, seed)
    and the content of the rows it generates), each matched against every dataset's source and
    generated-content fingerprints, so a generator's rows re-uploaded are the same source.
    ``patient_space_id``: the organisation's patient space, for a private upload into it. Its
    patients are keyed into the space, where a re-upload of an earlier private upload's rows
    (of the same space) simply shares their spend: that dataset's id is returned, for the
    steward's warning. Every other collision is refused: a generator's rows (they are its
    seed's patients, in the seed's space), a public dataset's rows or a private table's rows
    made public (a public table has no budget at all), a table outside the space (registered
    before spaces).

    The unique fingerprint column also refuses a concurrent twin at commit (a shared twin is
    serialised by the space lock and records ``shared_fingerprint``). The answer depends on
    another dataset's rows (an equality oracle), so only routes for the roles that
    hold the tables (data steward, admin: ``app.api.datasets.STEWARDS``) may call this.

    Raises:
        DatasetAlreadyRegistered: a collision that would be a second budget (409).
    """
    found = session.execute(
        select(Dataset.id, Dataset.source_kind, Dataset.public, Dataset.patient_space_id)
        .where(or_(Dataset.source_fingerprint.in_(fingerprints),
                   Dataset.content_fingerprint.in_(fingerprints)))
        .order_by(Dataset.id)).all()
    refused = [row.id for row in found if patient_space_id is None or row.public
               or row.source_kind != "upload" or row.patient_space_id != patient_space_id]
    if refused:
        existing = refused[0]
        raise DatasetAlreadyRegistered(
            f"this source is already registered as dataset {existing}; a second registration "
            f"would give the same patients a second privacy budget",
            field="source", existing_dataset_id=existing,
            existing_dataset=f"/v1/datasets/{existing}",
        )
    return found[0].id if found else None


def max_delta(n_rows: int) -> float:
    return 1.0 / (DELTA_ROWS_FACTOR * n_rows)


def check_delta(delta: float, n_rows: int, *, field: str) -> None:
    """Refuse a delta above 1/(10 n_rows) (422). A registration still awaiting its rows
    (``n_rows`` 0) has no size to check against yet: its upload checks the delta then."""
    if n_rows <= 0:
        return
    if delta > max_delta(n_rows):
        raise InvalidRequest(
            f"delta must be at most 1/(10 n_rows) = {max_delta(n_rows):.3g}: at delta near "
            f"1/n_rows, publishing one random record in full meets the guarantee, so such a "
            f"delta protects nobody",
            field=field,
            allowed=f"(0, {max_delta(n_rows):.6g}]",
        )


