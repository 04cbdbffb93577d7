"""The ledger composes each entry with the accountant it records, and checks its mechanism."""

import math
from dataclasses import dataclass

import pytest

from app.ledger import spend as ledger_spend
from app.ledger.models import NON_PRIVATE, SUBSAMPLED_GAUSSIAN, LedgerEntry
from app.privacy import accounting
from app.privacy.filter import conversion, filter_order, rdp_at


@dataclass
class Guarded:
    """A dataset as the ledger reads it: a budget and the filter's fixed order."""

    id: int = 1
    budget_epsilon: float | None = 8.0
    budget_delta: float | None = 1e-5
    filter_order: float | None = filter_order(8.0, 1e-5)


DATASET = Guarded()

def _entry(**changes: object) -> LedgerEntry:
    fields: dict[str, object] = {
        "id": 1, "dataset_id": 1, "job_id": 1, "mechanism": SUBSAMPLED_GAUSSIAN,
        "noise_multiplier": 1.1, "sample_rate": 0.01, "steps": 1000, "clip_norm": 1.0,
        "delta": 1e-5, "accountant": "rdp",
    }
    fields.update(changes)
    return LedgerEntry(**fields)


def test_a_recorded_mechanism_is_composed_by_the_filter_at_its_order() -> None:
    entry, mechanism = _entry(), accounting.Mechanism(1.1, 0.01, 1000)
    order = DATASET.filter_order
    assert order is not None
    at_order = rdp_at([mechanism] * 2, order) + conversion(order, 1e-5)
    assert ledger_spend.composed_epsilon(DATASET, [entry, entry]) == pytest.approx(at_order)
    # One release alone: the tighter of the filter's figure and its own tight epsilon.
    alone = min(rdp_at([mechanism], order) + conversion(order, 1e-5),
                accounting.create_accountant("prv").epsilon([mechanism], 1e-5))
    assert ledger_spend.composed_epsilon(DATASET, [entry]) == pytest.approx(alone)


def test_a_public_dataset_reports_the_best_order_for_information() -> None:
    public = Guarded(budget_epsilon=None, budget_delta=None, filter_order=None)
    expected = accounting.create_accountant("rdp").epsilon(
        [accounting.Mechanism(1.1, 0.01, 1000)] * 2, 1e-5)
    assert ledger_spend.composed_epsilon(public, [_entry(), _entry()]) == pytest.approx(expected)


def test_non_private_entry_composes_to_infinity() -> None:
    entry = _entry(mechanism=NON_PRIVATE, noise_multiplier=0.0)
    assert math.isinf(ledger_spend.composed_epsilon(DATASET, [entry, entry]))


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
        ledger_spend.composed_epsilon(DATASET, [_entry(), _entry(id=2, **changes)])
