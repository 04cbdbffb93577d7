"""The code systems this service defines, as FHIR R4 ``CodeSystem`` resources, served at the
path of their canonical URL (``https://dpcrisis.dev/fhir/CodeSystem/risk-band`` at
``/fhir/CodeSystem/risk-band``), so a deployment at that address resolves its own codes.

- ``risk-band``: the service's risk bands, the second coding of a RiskAssessment's
  ``qualitativeRisk``. Each model has its own cut-offs (``app.bands``): the definitions give
  the rule and the defaults; the RiskAssessment's coding says the model's own.
- ``cds-topic``: the topic of every CDS Hooks card (``source.topic``).
"""

from typing import Any

from app.bands import DEFAULT_BAND_THRESHOLDS, Band, cut_offs
from app.core.errors import NotFound
from app.fhir.codes import BAND_SYSTEM, HORIZON_DAYS, TOPIC_CODE, TOPIC_SYSTEM

VERSION = "1"
PUBLISHER = "dpcrisis"


class UnknownCodeSystem(NotFound):
    kind, title = "code-system-not-found", "CodeSystem not found"


def _band_concepts() -> list[dict[str, Any]]:
    low, high = cut_offs(DEFAULT_BAND_THRESHOLDS)
    rule = {
        Band.LOW: f"below the model's low_medium cut-off ({low:g} by default)",
        Band.MEDIUM: f"from the model's low_medium cut-off ({low:g} by default) up to, not "
                     f"including, its medium_high cut-off ({high:g} by default)",
        Band.HIGH: f"from the model's medium_high cut-off ({high:g} by default) up",
    }
    return [{"code": str(band), "display": f"{band.capitalize()} risk band",
             "definition": f"A {HORIZON_DAYS}-day probability of a mental-health crisis "
                           f"{rule[band]}."} for band in Band]


def _code_system(cid: str, url: str, name: str, title: str, description: str,
                 concepts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceType": "CodeSystem", "id": cid, "url": url, "version": VERSION,
        "name": name, "title": title, "status": "active", "experimental": False,
        "publisher": PUBLISHER, "description": description, "caseSensitive": True,
        "content": "complete", "count": len(concepts), "concept": concepts,
    }


def code_systems() -> dict[str, dict[str, Any]]:
    """Every CodeSystem by id."""
    return {
        "risk-band": _code_system(
            "risk-band", BAND_SYSTEM, "DpcrisisRiskBand", "dpcrisis risk bands",
            "The service's risk bands of a 30-day mental-health crisis probability. Cut-offs "
            "belong to each model (each cut-off belongs to the band above it); a "
            "RiskAssessment's coding states the scoring model's own.", _band_concepts()),
        "cds-topic": _code_system(
            "cds-topic", TOPIC_SYSTEM, "DpcrisisCdsTopic", "dpcrisis CDS Hooks card topics",
            "The topic of the service's CDS Hooks cards, the same for every model and version.",
            [{"code": TOPIC_CODE, "display": f"{HORIZON_DAYS}-day mental-health crisis risk",
              "definition": "A card about the patient's probability of a mental-health crisis "
                            f"within {HORIZON_DAYS} days."}]),
    }


def read(code_system_id: str) -> dict[str, Any]:
    """One CodeSystem. Raises UnknownCodeSystem (404)."""
    found = code_systems().get(code_system_id)
    if found is None:
        raise UnknownCodeSystem(f"no CodeSystem {code_system_id!r}; this server has "
                                + ", ".join(sorted(code_systems())))
    return found


def search(url: str | None) -> dict[str, Any]:
    """``GET /fhir/CodeSystem?url=...``: a searchset Bundle of the matching CodeSystems."""
    found = [c for c in code_systems().values() if url is None or c["url"] == url]
    return {"resourceType": "Bundle", "type": "searchset", "total": len(found),
            "entry": [{"fullUrl": c["url"], "resource": c, "search": {"mode": "match"}}
                      for c in found]}
