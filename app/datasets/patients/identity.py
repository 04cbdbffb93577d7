"""Patient identity and data identity.

Patient identity: each record has a stable id (the generator's index; an uploaded table's id
column). Its part (training, calibration or evaluation) is a keyed pseudo-random function of
that id under a per-dataset secret kept server-side (``app.datasets.record_coins``: a CBC-MAC
with AES-256, or keyed BLAKE2b for datasets registered before it), mapped to a uniform number
in [0, 1). Adding or removing one patient therefore moves no other patient
between parts, so neighbouring datasets (add/remove one record) train on training sets that
differ in at most that record, and the held-out releases compose in parallel with training
(``app.privacy.parallel``). Without the secret nobody can tell a record's part from its id.

Data identity: a fingerprint of the source (for the generator: its size and seed), unique
among registered datasets, so one population cannot be registered twice, nor once private and
once public, to get two budgets.
"""

import hashlib
import secrets
from collections.abc import Iterable
from enum import IntEnum
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from app.datasets import record_coins

RecordIds: TypeAlias = Iterable[int | str] | pa.Array | pa.ChunkedArray | record_coins.IdBlocks
CURRENT_SCHEME = record_coins.CURRENT_SCHEME


class Part(IntEnum):
    TRAIN = 0
    CALIBRATION = 1
    EVALUATION = 2


# Public fractions of the parts (the coins' cut points).
FRACTIONS = {Part.TRAIN: 0.7, Part.CALIBRATION: 0.15, Part.EVALUATION: 0.15}
_CUTS = np.cumsum([FRACTIONS[part] for part in Part])[:-1]
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh per-dataset secret (hex), from the OS's CSPRNG."""
    return secrets.token_hex(SECRET_BYTES)


def coins(record_ids: RecordIds, secret: str, *, scheme: str) -> np.ndarray:
    """Each record's coin in [0, 1) under the dataset's coin ``scheme``
    (``app.datasets.record_coins``: keyed BLAKE2b for datasets registered before AES-v2)."""
    return record_coins.coins(record_ids, secret, scheme=scheme)


def parts_of(record_ids: RecordIds, secret: str, *, scheme: str) -> np.ndarray:
    """Each record's part (``Part`` values) from its coin."""
    return parts_of_words(record_coins.keyed_words(record_ids, secret, scheme=scheme))


def parts_of_words(words: np.ndarray) -> np.ndarray:
    """Each record's part from its keyed word (``record_coins.keyed_words``)."""
    return np.searchsorted(_CUTS, record_coins.to_unit(words), side="right").astype(np.int8)


def part_counts(parts: np.ndarray) -> dict[Part, int]:
    counts = np.bincount(parts, minlength=len(Part))
    return {part: int(counts[part]) for part in Part}


class PartTally:
    """A dataset's keyed words taken batch by batch (an ``ingest`` id digest), its parts
    counted as they come: the reading thread counts them beside the parse, and the upload's
    accept, which runs alone, does not pass over a million words again."""

    def __init__(self, secret: str, scheme: str) -> None:
        self.secret, self.scheme = secret, scheme
        self.rows, self.counts = 0, np.zeros(len(Part), np.int64)

    def __call__(self, ids: RecordIds) -> np.ndarray:
        words = record_coins.keyed_words(ids, self.secret, scheme=self.scheme)
        self.counts += np.bincount(parts_of_words(words), minlength=len(Part))
        self.rows += len(words)
        return words

    def counts_of(self, words: np.ndarray) -> dict[Part, int]:
        """The parts of ``words`` (all the upload's words): the tally when it counted exactly
        these rows, else counted here (a CSV read twice, text then bytes, tallied its first
        pass too: its count is then above the rows)."""
        if self.rows != len(words):
            return part_counts(parts_of_words(words))
        return {part: int(self.counts[part]) for part in Part}


def synthetic_fingerprint(n_rows: int, seed: int) -> str:
    """The generator's source identity: the same (size, seed) is the same population."""
    return hashlib.sha256(f"synthetic:v1:{n_rows}:{seed}".encode()).hexdigest()
