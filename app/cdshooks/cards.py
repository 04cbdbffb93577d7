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
from app.fhir.codes import HORIZON_DAYS, TOPIC_CODE, TOPIC_SYSTEM, label_of
from app.fhir.service import percent
from app.scoring.patients import allowed_of
from app.scoring.schemas import RiskResult

INDICATOR: dict[Band, Indicator] = {Band.LOW: "info", Band.MEDIUM: "warning", Band.HIGH: "critical"}
SOURCE_LABEL = "dpcrisis 30-day crisis risk (differentially private model)"
SUMMARY_LIMIT = 140


TOPIC = Coding(system=TOPIC_SYSTEM, code=TOPIC_CODE,
               display=f"{HORIZON_DAYS}-day mental-health crisis risk")
"""Every card's ``source.topic``: the same whichever model or version scored (EHRs group and
count cards by topic; the model is named in the detail)."""


def _source() -> CardSource:
    return CardSource(label=SOURCE_LABEL, topic=TOPIC)


def _summary(scored: RiskResult) -> str:
    text = (
        f"{scored.band.capitalize()} {HORIZON_DAYS}-day crisis risk: "
        f"{percent(scored.probability)} (DP model {scored.model.id})"
    )
    return text[: SUMMARY_LIMIT - 1]


def _detail(scored: RiskResult) -> str:
    low, high = (100 * t for t in cut_offs(scored.band_thresholds))
    lines = [
        f"**Probability of a mental-health crisis within {HORIZON_DAYS} days: "
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


def card(scored: RiskResult) -> Card:
    return Card(
        uuid=str(uuid.uuid4()),
        summary=_summary(scored),
        indicator=INDICATOR[Band(scored.band)],
        detail=_detail(scored),
        source=_source(),
    )


def _listed(features: Sequence[FeatureSpec]) -> list[str]:
    return [f"- {label_of(f)} (`{f.name}`, {allowed_of(f)})" for f in features]


def insufficient_card(*, model: dict[str, Any], uncoded: Sequence[FeatureSpec],
                      lacking: Sequence[FeatureSpec]) -> Card:
    """The card for a patient the model cannot score from this call.

    Args:
        model: the active model's block (id, version, ...).
        uncoded: features without a code in the model's schema: no prefetch carries them.
        lacking: features that could be prefetched but were not in this call's prefetch.
    """
    lines = [f"**{HORIZON_DAYS}-day crisis risk not scored: the model needs data this call "
             "does not carry.**", ""]
    if uncoded:
        lines += ["No clinical code in the model's schema, so no prefetch carries them (give "
                  "them in a POST /v1/risk request or the dashboard form):", "",
                  *_listed(uncoded), ""]
    if lacking:
        lines += ["Not in this call's prefetch:", "", *_listed(lacking), ""]
    lines.append(f"Model {model['id']} (version {model['version']}).")
    return Card(
        uuid=str(uuid.uuid4()),
        summary=f"{HORIZON_DAYS}-day crisis risk not scored: insufficient data",
        indicator="info",
        detail="\n".join(lines),
        source=_source(),
    )
