"""A card names the model's declared outcome: a clinic's model of another outcome is never
described as crisis risk (the crisis words live only in the built-in schema)."""

import re
from types import SimpleNamespace
from typing import cast

import pytest

from app.bands import DEFAULT_BAND_THRESHOLDS
from app.cdshooks.cards import SUMMARY_LIMIT, card, insufficient_card
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema, outcome_words
from app.scoring.schemas import RiskResult

CRISIS = re.compile(r"\bcrisis\b", re.IGNORECASE)  # the word, not the product's name


def _schema(label: str | None) -> DatasetSchema:
    outcome = {"name": "readmitted_365d", **({"label": label} if label else {})}
    return DatasetSchema.model_validate({
        **BUILT_IN_SCHEMA.model_dump(mode="json", by_alias=True), "outcome": outcome})


def test_the_words_are_the_declared_label_or_the_column() -> None:
    assert outcome_words(_schema("Readmission within a year")) == "Readmission within a year"
    assert outcome_words(_schema(None)) == "readmitted_365d"
    assert "risis" in outcome_words(BUILT_IN_SCHEMA)  # the built-in schema keeps its own words


def scored(band: str = "high", probability: float = 0.41) -> RiskResult:
    return cast(RiskResult, SimpleNamespace(  # what a card reads of a RiskResult
        probability=probability, band=band, band_thresholds=DEFAULT_BAND_THRESHOLDS,
        contributions=[], imputed=[], reference=SimpleNamespace(probability=0.1),
        model=SimpleNamespace(id=3, kind="logistic", version="v", statement="s")))


def test_a_card_for_another_outcome_says_nothing_of_a_crisis() -> None:
    schema = _schema("Readmission within a year")
    shown = card(scored(), schema=schema)
    texts = [shown.summary, shown.detail, shown.source.label, shown.source.topic.display,
             shown.source.topic.code]
    assert "Readmission within a year" in shown.summary and "41.0%" in shown.summary
    assert "Readmission within a year" in shown.source.label
    assert "no time window declared" in shown.detail
    assert not [t for t in texts if CRISIS.search(t)], texts
    empty = insufficient_card(model={"id": 3, "version": "v"}, schema=schema, uncoded=[],
                              lacking=[])
    assert not CRISIS.search(empty.summary + empty.detail + empty.source.label)


@pytest.mark.parametrize(("band", "indicator"), [
    ("low", "info"), ("medium", "info"), ("high", "warning")])
def test_the_indicator_follows_the_band_and_is_never_critical(band: str,
                                                              indicator: str) -> None:
    assert card(scored(band), schema=BUILT_IN_SCHEMA).indicator == indicator


def test_a_long_label_is_shortened_never_the_probability() -> None:
    label = "Readmission " + "x" * 180
    shown = card(scored(probability=0.1234), schema=_schema(label))
    assert len(shown.summary) < SUMMARY_LIMIT
    assert shown.summary.endswith(": 12.3% (DP model 3)") and "\u2026" in shown.summary
    empty = insufficient_card(model={"id": 3, "version": "v"}, schema=_schema(label),
                              uncoded=[], lacking=[])
    assert len(empty.summary) < SUMMARY_LIMIT and empty.summary.endswith("insufficient data")
