"""Which rows of a dataset a release reads, once the per-patient filter left some patients out.

The ledger records, at admission, the patterns of the patients a release leaves out
(``app.ledger.left_out``). Here each row's patient is found in the space's patient index (the
keyed digest of its id in the space, ``app.datasets.patients.patient_index.digests``), their live
block gives the datasets they are in now, and the recorded decision is applied. Where the
answer is uncertain (a space that keys no ids, which takes no release anyway:
``spaces.check_keyed``; a patient the index does not hold) the row is left out: reading fewer
rows than were charged only over-charges, reading a row whose patient was not charged would
break their filter.
"""

import numpy as np
import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.orm import Session, object_session

from app.datasets.models import Dataset
from app.datasets.patients import index_files, patient_index
from app.ledger import spaces
from app.ledger.left_out import LeftOut


def read_rows(dataset: Dataset, ids: pa.Array | pa.ChunkedArray, left: LeftOut | None
              ) -> np.ndarray:
    """A mask over the dataset's rows (``ids``, in table order): True where the release that
    left out ``left`` reads the row (every row when ``left`` is None)."""
    if left is None:
        return np.ones(len(ids), bool)
    session = object_session(dataset)
    space = None if session is None or dataset.patient_space_id is None else \
        session.get(spaces.PatientSpace, dataset.patient_space_id)
    if session is None or space is None or space.secret is None:  # no key finds its rows
        return np.zeros(len(ids), bool)
    return _by_index(session, space, ids, left)


def _by_index(session: Session, space: spaces.PatientSpace, ids: pa.Array | pa.ChunkedArray,
              left: LeftOut) -> np.ndarray:
    words = patient_index.digests(ids, space)  # ids whose digests collide: one patient
    distinct = np.unique(words)  # sorted and distinct, as the index searches them
    known, blocks = index_files.load(space).blocks_of(distinct)
    found = np.unique(blocks).tolist()
    datasets = dict(session.execute(select(spaces.PatientBlock.id, spaces.PatientBlock.datasets)
                                    .where(spaces.PatientBlock.id.in_(found))).tuples().all())
    reads_block = {b: b in datasets and not left.leaves_out(datasets[b]) for b in found}
    reads = np.zeros(len(distinct), bool)  # a patient the index does not hold: left out
    reads[known] = [reads_block[b] for b in blocks.tolist()]
    return reads[np.searchsorted(distinct, words)]
