"""A generator seed's patients: one patient space per seed, every generator dataset of it in it.

The built-in generator (``app.datasets.synthetic``) draws a table from its seed alone: a
registration that varies anything else (a ``shift``, the effects) re-draws the same patients,
with the same features but the shifted ones and outcomes that mostly agree. So the patients of
a private generator dataset are its seed's rows, whatever else the request varies, and a
re-registration shares their spend: the seed has one patient space (``source_key``
"synthetic:<seed>", kind ``GENERATOR``), made by its first private dataset with that
dataset's budget as the per-patient budget, and joined by every later one.

Patient i of the seed is row i of every generator dataset with that seed: its id is the
decimal text of i (``row_ids``), keyed under the space's secret into the space's patient index
as an upload's ids are (``patient_index.add_dataset``), so blocks split exactly (datasets of
2,000 and 3,000 rows of one seed share the first 2,000 patients) and a release finds each
row's block as it finds an upload's. Under one size this is exact; across sizes row i is
another draw of most columns, counted as the same patient: an over-charge, never an
under-charge.
"""

import numpy as np
import pyarrow as pa
from sqlalchemy.orm import Session

from app.datasets import record_coins
from app.datasets.models import Dataset
from app.datasets.patients import identity, patient_index
from app.datasets.rules import check_delta
from app.ledger import space_chain, spaces
from app.ledger.spaces import PatientSpace


def source_key(seed: int) -> str:
    """The key of the seed's space (``PatientSpace.source_key``)."""
    return f"synthetic:{int(seed)}"


def row_ids(n_rows: int) -> pa.Array:
    """The patient ids of a generator dataset's rows, in row order: row i is patient i of its
    seed (keyed as the text "i", ``record_coins.id_strings``)."""
    return pa.array(np.arange(n_rows, dtype=np.int64))


def space_for(*, session: Session, seed: int, epsilon: float, delta: float) -> PatientSpace:
    """The seed's space; made, with the per-patient budget (``epsilon``, ``delta``) and its
    first chain record, when the seed has none yet. Spaces are made under the organisation
    space's lock, so two registrations of a new seed at once make one."""
    key = source_key(seed)
    space = spaces.by_source(session=session, source_key=key)
    if space is not None:
        return space
    spaces.lock_space(session=session, space_id=spaces.organisation(session=session).id)
    space = spaces.by_source(session=session, source_key=key)
    if space is not None:
        return space
    space = spaces.new_space(session=session, kind=spaces.SpaceKind.GENERATOR, epsilon=epsilon,
                             delta=delta, secret=identity.new_secret(),
                             id_scheme=record_coins.CURRENT_SCHEME, source_key=key)
    space_chain.append_budget(session=session, space=space)  # its budget chain's first record
    return space


def check_size(*, space: PatientSpace, n_rows: int) -> None:
    """The seed's per-patient delta must protect a table of ``n_rows`` (at most 1/(10 n)), as
    the organisation's does each upload.

    Raises:
        InvalidRequest: the seed's per-patient delta is above 1/(10 ``n_rows``) (422).
    """
    check_delta(space.budget_delta, n_rows, field="the seed's per-patient delta")


def join(*, session: Session, dataset: Dataset) -> patient_index.Overlap:
    """Key the generator dataset's rows into its seed's space (``dataset.patient_space_id``)
    and move them into their blocks, chained, under the space lock, in the caller's
    transaction.

    Raises:
        IndexCorrupted: the space's stored index does not match its record (nothing changes).
    """
    assert dataset.patient_space_id is not None
    return patient_index.add_dataset(session=session, space_id=dataset.patient_space_id,
                                     dataset_id=dataset.id, ids=row_ids(dataset.n_rows))
