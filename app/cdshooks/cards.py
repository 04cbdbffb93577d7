"""CDS Hooks cards: a risk card per scored patient, or an "insufficient data" card.

Both are informational (no suggestions, no links) and both read the scoring model's declared
outcome (``outcome_words``, its horizon, its topic: ``app.fhir.codes.topic_of``): nothing here
names an outcome of its own. A risk card's summary stays under 140 characters (the outcome's
words are shortened, never the probability), its indicator follows the band (``INDICATOR``)
and its markdown detail gives the probability, the outcome and its window, the reasons (exact
Shapley contributions), the inputs scored at their reference value because the call had no
data for them (as the schema declares), and the model's privacy statement. An insufficient-data
card (indicator info: it is no alert) names the features the call could not carry and says
where to give them; it holds no patient value.
"""

import uuid
from collections.abc import Sequence
from typing import Any

from app.bands import Band, cut_offs
from app.cdshooks.schemas import Card, CardSource, Coding, Indicator
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureSpec, outcome_words
from app.fhir.codes import label_of, topic_of
from app.fhir.service import percent
from app.scoring.patients import allowed_of
from app.scoring.schemas import RiskResult

INDICATOR: dict[Band, Indicator] = {Band.LOW: "info", Band.MEDIUM: "info", Band.HIGH: "warning"}
"""Band -> CDS Hooks indicator. Never ``critical``: CDS Hooks keeps that for cards an EHR should
interrupt for, and a band is a clinic's declared policy on a DP model's probability, a prompt
to review, not an alarm (``warning`` for high; low and medium are ``info``)."""
SUMMARY_LIMIT = 140
SOURCE_OUTCOME_CHARS = 80
"""The most of the outcome's words a card's source label shows."""


def shortened(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def _source(schema: DatasetSchema) -> CardSource:
    topic = topic_of(schema)
    words = shortened(outcome_words(schema), SOURCE_OUTCOME_CHARS)
    return CardSource(label=f"dpcrisis risk model: {words} (differentially private)",
                      topic=Coding(system=topic.system, code=topic.code, display=topic.display))


def _summary(scored: RiskResult, outcome: str) -> str:
    head = f"{scored.band.capitalize()} risk ("
    tail = f"): {percent(scored.probability)} (DP model {scored.model.id})"
    room = SUMMARY_LIMIT - 1 - len(head) - len(tail)
    return head + shortened(outcome, room) + tail


def window(schema: DatasetSchema) -> str:
    """The outcome's prediction window, in words."""
    days = schema.outcome.horizon_days
    if days is None:
        return "no time window declared"
    return f"within {days} day{'s' if days != 1 else ''} of this assessment"


def _detail(scored: RiskResult, schema: DatasetSchema) -> str:
    low, high = (100 * t for t in cut_offs(scored.band_thresholds))
    lines = [
        f"**Probability of the model's outcome ({outcome_words(schema)}): "
        f"{percent(scored.probability)}**, risk band **{scored.band}** "
        f"(low < {low:g}% <= medium < {high:g}% <= high).",
        "",
        f"Outcome: {outcome_words(schema)}, {window(schema)}.",
        "",
        "Why, largest contribution first (exact Shapley values against the public reference "
        f"patient, {percent(scored.reference.probability)}):",
        "",
    ]
    for c in scored.contributions:
        points = 100 * c.contribution_probability
        lines.append(f"- {c.reason}: {c.direction} the risk ({points:+.1f} points)")
    if scored.imputed:
        labels = {c.feature: c.label for c in scored.contributions}
        lines += ["", "Imputed (no data in this call, so scored at the reference value, as the "
                  "model's schema declares for a missing value): "
                  + ", ".join(f"{labels[name]} (`{name}`)" for name in scored.imputed) + "."]
    model = scored.model
    lines += [
        "",
        f"Model {model.id} ({model.kind}, version {model.version}). {model.statement}",
    ]
    return "\n".join(lines)


def card(scored: RiskResult, *, schema: DatasetSchema) -> Card:
    """A risk card; ``schema``: the scoring model's, whose outcome the card names."""
    return Card(
        uuid=str(uuid.uuid4()),
        summary=_summary(scored, outcome_words(schema)),
        indicator=INDICATOR[Band(scored.band)],
        detail=_detail(scored, schema),
        source=_source(schema),
    )


def _listed(features: Sequence[FeatureSpec]) -> list[str]:
    return [f"- {label_of(f)} (`{f.name}`, {allowed_of(f)})" for f in features]


def insufficient_card(*, model: dict[str, Any], schema: DatasetSchema,
                      uncoded: Sequence[FeatureSpec], lacking: Sequence[FeatureSpec]) -> Card:
    """The card for a patient the model cannot score from this call.

    Args:
        model: the active model's block (id, version, ...).
        schema: the active model's declared schema (its outcome names the card).
        uncoded: features without a code in the model's schema: no prefetch carries them.
        lacking: features that could be prefetched but were not in this call's prefetch.
    """
    outcome = outcome_words(schema)
    lines = [f"**Risk ({outcome}) not scored: the model needs data this call does not "
             "carry.**", ""]
    if uncoded:
        lines += ["No code or prefetch in the model's schema, so no prefetch carries them "
                  "(give them in a POST /v1/risk request or the dashboard form, or declare "
                  "where an EHR keeps them: docs/ehr.md):", "",
                  *_listed(uncoded), ""]
    if lacking:
        lines += ["Not in this call's prefetch:", "", *_listed(lacking), ""]
    lines.append(f"Model {model['id']} (version {model['version']}).")
    tail = ") not scored: insufficient data"
    return Card(
        uuid=str(uuid.uuid4()),
        summary="Risk (" + shortened(outcome, SUMMARY_LIMIT - 1 - len("Risk (" + tail)) + tail,
        indicator="info",
        detail="\n".join(lines),
        source=_source(schema),
    )
