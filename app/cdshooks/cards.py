"""CDS Hooks cards: a risk card per scored patient, or an "insufficient data" card.

Both are informational (no suggestions, no links). A risk card's summary stays under 140
characters, its indicator follows the band (low -> info, medium -> warning, high -> critical)
and its markdown detail gives the probability, the reasons (exact Shapley contributions) and
the model's privacy statement. An insufficient-data card (indicator info: it is no alert) names
the features the call could not carry and says where to give them; it holds no patient value.
"""

import uuid
from collections.abc import Sequence
from typing import Any

from app.bands import Band, cut_offs
from app.cdshooks.schemas import Card, CardSource, Coding, Indicator
from app.datasets.dataset_schema import FeatureSpec
from app.fhir.codes import TOPIC_CODE, TOPIC_SYSTEM, label_of
from app.fhir.service import percent
from app.scoring.patients import allowed_of
from app.scoring.schemas import RiskResult

INDICATOR: dict[Band, Indicator] = {Band.LOW: "info", Band.MEDIUM: "warning", Band.HIGH: "critical"}
SOURCE_LABEL = "dpcrisis risk model (differentially private)"
SUMMARY_LIMIT = 140


TOPIC = Coding(system=TOPIC_SYSTEM, code=TOPIC_CODE,
               display="Risk from a differentially private model")
"""Every card's ``source.topic``: the same whichever model or version scored (EHRs group and
count cards by topic; the model and its declared outcome are named in the card)."""


def _source() -> CardSource:
    return CardSource(label=SOURCE_LABEL, topic=TOPIC)


def _summary(scored: RiskResult, outcome: str) -> str:
    text = (
        f"{scored.band.capitalize()} risk ({outcome}): "
        f"{percent(scored.probability)} (DP model {scored.model.id})"
    )
    return text[: SUMMARY_LIMIT - 1]


def _detail(scored: RiskResult, outcome: str) -> str:
    low, high = (100 * t for t in cut_offs(scored.band_thresholds))
    lines = [
        f"**Probability of the model's outcome ({outcome}): "
        f"{percent(scored.probability)}**, risk band **{scored.band}** "
        f"(low < {low:g}% <= medium < {high:g}% <= high).",
        "",
        "Why, largest contribution first (exact Shapley values against the public reference "
        f"patient, {percent(scored.reference.probability)}):",
        "",
    ]
    for c in scored.contributions:
        points = 100 * c.contribution_probability
        lines.append(f"- {c.reason}: {c.direction} the risk ({points:+.1f} points)")
    model = scored.model
    lines += [
        "",
        f"Model {model.id} ({model.kind}, version {model.version}). {model.statement}",
    ]
    return "\n".join(lines)


def card(scored: RiskResult, *, outcome: str) -> Card:
    """A risk card; ``outcome``: the model's declared outcome in words (``outcome_words``)."""
    return Card(
        uuid=str(uuid.uuid4()),
        summary=_summary(scored, outcome),
        indicator=INDICATOR[Band(scored.band)],
        detail=_detail(scored, outcome),
        source=_source(),
    )


def _listed(features: Sequence[FeatureSpec]) -> list[str]:
    return [f"- {label_of(f)} (`{f.name}`, {allowed_of(f)})" for f in features]


def insufficient_card(*, model: dict[str, Any], outcome: str, uncoded: Sequence[FeatureSpec],
                      lacking: Sequence[FeatureSpec]) -> Card:
    """The card for a patient the model cannot score from this call.

    Args:
        model: the active model's block (id, version, ...).
        outcome: the model's declared outcome in words.
        uncoded: features without a code in the model's schema: no prefetch carries them.
        lacking: features that could be prefetched but were not in this call's prefetch.
    """
    lines = [f"**Risk ({outcome}) not scored: the model needs data this call does not "
             "carry.**", ""]
    if uncoded:
        lines += ["No clinical code in the model's schema, so no prefetch carries them (give "
                  "them in a POST /v1/risk request or the dashboard form):", "",
                  *_listed(uncoded), ""]
    if lacking:
        lines += ["Not in this call's prefetch:", "", *_listed(lacking), ""]
    lines.append(f"Model {model['id']} (version {model['version']}).")
    return Card(
        uuid=str(uuid.uuid4()),
        summary=f"Risk ({outcome}) not scored: insufficient data"[: SUMMARY_LIMIT - 1],
        indicator="info",
        detail="\n".join(lines),
        source=_source(),
    )
