"""A card names the model's declared outcome: a clinic's model of another outcome is never
described as crisis risk (the crisis words live only in the built-in schema)."""

import re
from types import SimpleNamespace
from typing import cast

from app.bands import DEFAULT_BAND_THRESHOLDS
from app.cdshooks.cards import card, insufficient_card
from app.datasets.dataset_schema import CRISIS_SCHEMA, DatasetSchema, outcome_words
from app.scoring.schemas import RiskResult

CRISIS = re.compile(r"\bcrisis\b", re.IGNORECASE)  # the word, not the product's name


def _schema(label: str | None) -> DatasetSchema:
    outcome = {"name": "readmitted_365d", **({"label": label} if label else {})}
    return DatasetSchema.model_validate({
        **CRISIS_SCHEMA.model_dump(mode="json", by_alias=True), "outcome": outcome})


def test_the_words_are_the_declared_label_or_the_column() -> None:
    assert outcome_words(_schema("Readmission within a year")) == "Readmission within a year"
    assert outcome_words(_schema(None)) == "readmitted_365d"
    assert "risis" in outcome_words(CRISIS_SCHEMA)  # the built-in schema keeps its own words


def test_a_card_for_another_outcome_says_nothing_of_a_crisis() -> None:
    scored = SimpleNamespace(  # what a card reads of a RiskResult
        probability=0.41, band="high", band_thresholds=DEFAULT_BAND_THRESHOLDS,
        contributions=[], reference=SimpleNamespace(probability=0.1),
        model=SimpleNamespace(id=3, kind="logistic", version="v", statement="s"))
    words = outcome_words(_schema("Readmission within a year"))
    shown = card(cast(RiskResult, scored), outcome=words)
    texts = [shown.summary, shown.detail, shown.source.label or "",
             shown.source.topic.display or ""]  # type: ignore[union-attr]
    assert "Readmission within a year" in shown.summary
    assert not [t for t in texts if CRISIS.search(t)], texts
    empty = insufficient_card(model={"id": 3, "version": "v"}, outcome=words, uncoded=[],
                              lacking=[])
    assert not CRISIS.search(empty.summary + empty.detail)
