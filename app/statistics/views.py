"""A release as the API shows it: its stored answers, with its ledger charge and guarantee."""

import math

from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy import accounting
from app.privacy.figures import PRIVACY_UNIT, epsilon_text
from app.statistics import mechanisms
from app.statistics.models import StatisticsRelease
from app.statistics.schemas import (
    AnswerOut,
    ReleasePrivacyOut,
    StatisticsReleaseOut,
)

ROWS_NOTE = (
    "every record of the dataset (its training, calibration and evaluation parts alike); the "
    "release is charged as a mechanism of its own and composed sequentially with every job "
    "and release of the dataset by its Rényi filter"
)


def release_epsilon(entry: LedgerEntry | None) -> float | None:
    """The release's own epsilon: a pure release's pure epsilon (delta 0), else its tight
    epsilon at its delta (exact for a Gaussian one), both from its ledger event."""
    if entry is None:
        return None
    try:
        pure = accounting.pure_epsilon([ledger_spend.recorded_event(entry)])
    except (ledger_spend.LedgerIntegrityError, ValueError):  # shown by the chain verification
        return None
    return pure if math.isfinite(pure) else entry.epsilon_prv


def statement(row: StatisticsRelease, entry: LedgerEntry | None) -> str:
    """The guarantee in words."""
    epsilon = release_epsilon(entry)
    noise = mechanisms.of(row.mechanism).words
    guarantee = f"({epsilon_text(epsilon)}, {0 if row.delta is None else row.delta:g})"
    charged = (f"It is charged to dataset {row.dataset_id}'s ledger as entry {entry.id}."
               if entry is not None else "It has no ledger entry (an integrity fault).")
    return (
        f"Privacy unit: {PRIVACY_UNIT}. Rows: {row.rows}, {ROWS_NOTE}. Mechanism: {noise} from "
        f"{row.library}'s exact samplers, added once to each query's counts and clipped sums, "
        "with sensitivities from the declared public bounds; the target was split over the "
        f"queries by their weights. Guarantee: {guarantee}-differential privacy for adding or "
        "removing one patient's record, covering every answer of this release (standard "
        f"errors and intervals are post-processing). {charged}"
    )


def release_view(row: StatisticsRelease, entry: LedgerEntry | None) -> StatisticsReleaseOut:
    """``row`` and its ledger entry as ``StatisticsReleaseOut``."""
    privacy = ReleasePrivacyOut(
        mechanism=row.mechanism, target_epsilon=row.target_epsilon, delta=row.delta,
        epsilon=release_epsilon(entry),
        epsilon_rdp=entry.epsilon_rdp if entry is not None else None,
        noise_multiplier=entry.noise_multiplier if entry is not None else 0.0,
        ledger_entry_id=entry.id if entry is not None else None,
        statement=statement(row, entry),
    )
    return StatisticsReleaseOut.from_row(
        row, privacy=privacy, answers=[AnswerOut.model_validate(a) for a in row.answers])
