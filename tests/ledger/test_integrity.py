"""The ledger composes each entry with the accountant it records, and checks its mechanism."""

import math

import pytest

from app.ledger import spend as ledger_spend
from app.ledger.models import NON_PRIVATE, SUBSAMPLED_GAUSSIAN, LedgerEntry
from app.privacy import accounting


def _entry(**changes: object) -> LedgerEntry:
    fields: dict[str, object] = {
        "id": 1, "dataset_id": 1, "job_id": 1, "mechanism": SUBSAMPLED_GAUSSIAN,
        "noise_multiplier": 1.1, "sample_rate": 0.01, "steps": 1000, "clip_norm": 1.0,
        "delta": 1e-5, "accountant": "rdp",
    }
    fields.update(changes)
    return LedgerEntry(**fields)


def test_a_recorded_mechanism_is_composed_by_its_accountant() -> None:
    entry = _entry()
    expected = accounting.create_accountant("rdp").epsilon(
        [accounting.Mechanism(1.1, 0.01, 1000)], 1e-5
    )
    assert ledger_spend.composed_epsilon([entry, entry], 1e-5) == pytest.approx(
        accounting.create_accountant("rdp").epsilon(
            [accounting.Mechanism(1.1, 0.01, 1000)] * 2, 1e-5
        )
    )
    assert ledger_spend.composed_epsilon([entry], 1e-5) == expected


def test_non_private_entry_composes_to_infinity() -> None:
    entry = _entry(mechanism=NON_PRIVATE, noise_multiplier=0.0)
    assert math.isinf(ledger_spend.composed_epsilon([entry], 1e-5))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mechanism": "laplace"}, "unknown mechanism"),
        ({"mechanism": NON_PRIVATE}, "contradicts its mechanism"),
        ({"noise_multiplier": 0.0}, "contradicts its mechanism"),
        ({"accountant": "prv"}, "cannot be composed"),
        ({"accountant": "gdp"}, "cannot be composed"),
    ],
)
def test_an_entry_that_cannot_be_composed_as_recorded_is_refused(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ledger_spend.LedgerIntegrityError, match=message):
        ledger_spend.composed_epsilon([_entry(), _entry(id=2, **changes)], 1e-5)
