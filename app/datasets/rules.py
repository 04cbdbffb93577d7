"""Registration rules shared by synthetic sources and uploads: delta against the row count,
and one registration per source (data identity)."""

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


def check_new_source(session: Session, *fingerprints: str) -> None:
    """Refuse a source that is already registered (private or public): one budget per data.

    ``fingerprints``: the source's identities (an upload's content; a generator's (size, seed)
    and the content of the rows it generates), each matched against every dataset's source and
    generated-content fingerprints, so a generator's rows re-uploaded are the same source.

    The unique fingerprint column also refuses a concurrent twin at commit. The refusal names
    the existing dataset and, whether it names it or not, answers from another dataset's rows
    (an equality oracle: issue 26), so only routes for the roles that hold the tables (data
    steward, admin: ``app.api.datasets.STEWARDS``) may call this.
    """
    existing = session.scalar(select(Dataset.id).where(or_(
        Dataset.source_fingerprint.in_(fingerprints),
        Dataset.content_fingerprint.in_(fingerprints))))
    if existing is not None:
        raise DatasetAlreadyRegistered(
            f"this source is already registered as dataset {existing}; a second registration "
            f"would give the same patients a second privacy budget",
            field="source", existing_dataset_id=existing,
            existing_dataset=f"/v1/datasets/{existing}",
        )


def max_delta(n_rows: int) -> float:
    return 1.0 / (DELTA_ROWS_FACTOR * n_rows)


def check_delta(delta: float, n_rows: int, *, field: str) -> None:
    if delta > max_delta(n_rows):
        raise InvalidRequest(
            f"delta must be at most 1/(10 n_rows) = {max_delta(n_rows):.3g}: at delta near "
            f"1/n_rows, publishing one random record in full meets the guarantee, so such a "
            f"delta protects nobody",
            field=field,
            allowed=f"(0, {max_delta(n_rows):.6g}]",
        )


